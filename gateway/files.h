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
#include <stdint.h>
#include <sys/stat.h>

#define FILES_HOME "/home/user"

/* Whom a file operation acts as: the sandbox's user, or its own root (uid
 * 0 of its user namespace, which may read and write every file of the
 * sandbox, as root inside does; never host root). What is created belongs
 * to the one acting. */
enum files_user { FILES_USER, FILES_ROOT };

/* E2B's user names: "user" (or NULL or "", the default) and "root".
 * -EINVAL for any other name; -EPERM for root in a sandbox without one. */
int files_user_parse(const struct sandbox *sb, const char *name, enum files_user *out);

/* Turns path (relative ones are below FILES_HOME) into a clean absolute
 * path without "." or empty components. -EINVAL for an empty path or one
 * that is too long. ".." is kept: resolution confines it. */
int files_normalize(const char *path, char *out, size_t size);

/* Opens path for reading; -EISDIR for a directory. */
int files_open_read(const struct sandbox *sb, enum files_user who, const char *path, int *fd,
                    struct stat *st);
/* Creates or truncates path for writing, with any missing parent
 * directories, all owned by who. */
int files_open_write(const struct sandbox *sb, enum files_user who, const char *path, int *fd);
/* -EEXIST when it exists. Parents are created. */
int files_mkdir(const struct sandbox *sb, enum files_user who, const char *path);
/* Removes a file, or a directory with everything in it. */
int files_remove(const struct sandbox *sb, enum files_user who, const char *path);
int files_rename(const struct sandbox *sb, enum files_user who, const char *from, const char *to);

/* Whether who may resolve path, inside the sandbox, to a directory: 0 or
 * -errno. A path ending in "/." asks whether who may enter it (resolving
 * "." searches the directory itself). */
int files_enter_dir(const struct sandbox *sb, enum files_user who, const char *path);
/* E2B's EntryInfo of path (type, size, mode, permissions, owner, times). */
int files_stat(const struct sandbox *sb, enum files_user who, const char *path, json_t **entry);
/* The entries below the directory path, depth levels deep, directories
 * first; -ENOTDIR when it is not a directory. */
int files_list(const struct sandbox *sb, enum files_user who, const char *path, unsigned depth,
               json_t **entries);

/* Adds path, a directory, to the inotify instance inotify_fd with mask, as
 * who: opened inside (like every path here) and watched through its
 * descriptor. nofollow: a symlink at path is refused (-ENOTDIR). When
 * subdirs is given, appends the names of the directories in it, at most
 * max_subdirs in all. Returns the watch descriptor or -errno. */
int files_watch_dir(const struct sandbox *sb, enum files_user who, int inotify_fd, const char *path,
                    bool nofollow, uint32_t mask, json_t *subdirs, size_t max_subdirs);

#endif
