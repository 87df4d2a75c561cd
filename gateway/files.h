/* The files of a sandbox, for the file APIs (E2B's envd and Glovebox's
 * own). Every path is resolved inside the sandbox's root directory with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): "..", absolute paths
 * and symlinks planted by code in the sandbox all stay inside it, and the
 * sandbox's read-only mounts stay read-only. What the gateway creates
 * belongs to the sandbox's user. */
#ifndef GLOVEBOX_FILES_H
#define GLOVEBOX_FILES_H

#include "gateway/sandboxes.h"

#include <jansson.h>
#include <stdbool.h>
#include <sys/stat.h>

#define FILES_HOME "/home/user"

/* Turns path (relative ones are below FILES_HOME) into a clean absolute
 * path without "." or empty components. -EINVAL for an empty path or one
 * that is too long. ".." is kept: resolution confines it. */
int files_normalize(const char *path, char *out, size_t size);

/* Opens path for reading; -EISDIR for a directory. */
int files_open_read(const struct sandbox *sb, const char *path, int *fd, struct stat *st);
/* Creates or truncates path for writing, with any missing parent
 * directories, all owned by the sandbox's user. */
int files_open_write(const struct sandbox *sb, const char *path, int *fd);
/* -EEXIST when it exists. Parents are created. */
int files_mkdir(const struct sandbox *sb, const char *path);
/* Removes a file, or a directory with everything in it. */
int files_remove(const struct sandbox *sb, const char *path);
int files_rename(const struct sandbox *sb, const char *from, const char *to);

/* E2B's EntryInfo of path (type, size, mode, permissions, owner, times). */
int files_stat(const struct sandbox *sb, const char *path, json_t **entry);
/* The entries below the directory path, depth levels deep, directories
 * first; -ENOTDIR when it is not a directory. */
int files_list(const struct sandbox *sb, const char *path, unsigned depth, json_t **entries);

#endif
