"""Read-only views of a store: sharded datasets presented unsharded."""
