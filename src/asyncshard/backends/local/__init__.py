"""LocalStore: objects as files below a root folder.

* Reads seek to the range and read only it; blocking calls run in worker threads.
* Writes go to a temporary file in the destination folder and are renamed over the
  object, so a failure at any point leaves the previous object intact and no temporary
  file behind. Folders are created on demand; a failed write removes the folders it
  created, and a delete prunes the folders it left empty, so listings never show a
  prefix without keys (as on object stores).
* ``copy`` makes a hard link (under a temp name renamed over the target): no bytes
  move, and deleting the source later frees nothing on disk.
* Batches (``get_many``, ``set_many``, ``copy_many``) take one worker thread each instead of one per
  object; a batch of writes is made durable by one ``syncfs`` of the file system before
  its renames instead of one ``fsync`` per file (group commit: the same guarantee,
  data on disk before any object points at it).
* Versions never repeat: every write stores a random token in the temp file's
  ``user.asyncshard.version`` xattr before its rename, and the version is ``t<token>``.
  Where the file system has no user xattrs the version is ``inode-mtime_ns-size`` in hex,
  and each write (under the folder lock) makes its mtime later than the replaced
  object's, so a reused inode with an unticked coarse clock cannot repeat a version.
  Conditional writes compare the version under an exclusive ``flock`` on the
  destination folder, which also excludes other processes using asyncshard; every
  rename into place and every conditional delete happens under that lock, so a
  conditional delete never removes a file written after its check.
* Objects are regular files. A local folder cannot hold both ``a`` and ``a/b``: writing
  either when the other exists raises ``InvalidKeyError``.
* A write killed before its rename (``kill -9``, a power cut) leaves its temporary file
  ``.asyncshard-tmp-*``, hidden from listings. A temporary file older than
  ``temp_max_age`` (one hour) is stale: the first write into its folder (then again at
  most once per ``temp_max_age`` per folder) removes the stale ones there, and
  :meth:`LocalStore.cleanup_temp_files` sweeps the whole tree. A live writer keeps its
  file's modification time fresh while it writes and renames it moments later, so the
  age threshold never takes a file from under a writer in another process.
* Errors are typed: a name too long for the file system reads as missing and cannot be
  written (``InvalidKeyError``); a refused access raises ``StorePermissionError`` naming
  the path; any other file-system failure raises ``StoreBackendError`` (the ``OSError``
  is its ``__cause__``). No ``OSError`` escapes; opening with ``must_exist=True`` makes
  a missing root folder a ``StoreConfigError`` at once.

Links: every key is resolved (``realpath``) and refused unless it lies inside the root;
the root is resolved once, as soon as it exists. Then the check is repeated on what was
actually opened: the path of the open descriptor (``/proc/self/fd``) must lie inside the
root, for reads (fast and slow path), heads, the temp file a write creates, the folder
a write renames in (the rename goes through that folder's locked descriptor), the folder
a delete unlinks from and both ends of a copy. Listings and prunes (after deletes, after
a failed write, and ``prune``) open each folder relative to its parent's descriptor,
links not followed, and list or remove names through those descriptors. So swapping a
folder on the path for a link to outside, at any moment, cannot lead a read, write,
delete, copy, listing or prune outside; it makes the operation fail with a typed error
(or skip that folder). A link inside the root
to an object inside the root is an alias: reads and writes go to its target, a delete
removes the link. Listings show only what the API accepts: regular files (or links to
them inside the root) and folders whose names are valid key segments; links to folders
are not followed.
"""

from asyncshard.backends.local.descriptors import INLINE_READ
from asyncshard.backends.local.files import TEMP_MAX_AGE, TMP_PREFIX, VERSION_XATTR
from asyncshard.backends.local.store import LocalStore

__all__ = ["INLINE_READ", "TEMP_MAX_AGE", "TMP_PREFIX", "VERSION_XATTR", "LocalStore"]
