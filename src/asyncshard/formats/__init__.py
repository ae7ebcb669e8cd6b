"""Pure format code: bytes and numpy in, bytes and numpy out; nothing here does I/O."""
