/* Removing a directory's contents without ever following a symlink: each
 * child is reached from its parent's descriptor, one name at a time, so a
 * link planted inside cannot lead the removal elsewhere. */
#ifndef GLOVEBOX_TREE_H
#define GLOVEBOX_TREE_H

#include <stdint.h>

/* Removes everything inside the directory dirfd (not the directory
 * itself). 0 or the first -errno met; it goes on past errors. */
int tree_remove_at(int dirfd);
/* Removes the directory at path and everything in it; a link at path is
 * not followed (nothing is removed). 0, or the -errno of opening or of
 * removing path itself. */
int tree_remove(const char *path);
/* What the regular files directly in dirfd take on disk (their blocks),
 * in bytes; UINT64_MAX when it cannot be read. */
uint64_t tree_file_bytes_at(int dirfd);

#endif
