/* The files of a sandbox, for the file APIs (E2B's envd and Glovebox's
 * own). Every path is resolved inside the sandbox's root directory with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): "..", absolute paths
 * and symlinks planted by code in the sandbox all stay inside it, and the
 * sandbox's read-only mounts stay read-only. What the gateway creates
 * belongs to the sandbox's user. */
#ifndef GLOVEBOX_FILES_H
#define GLOVEBOX_FILES_H

#include "gateway/kernels/sandboxes.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#define FILES_HOME "/home/user"

/* E2B's file metadata: user.e2b.<key> extended attributes. At most
 * FILES_METADATA_MAX bytes of names (with the prefix) and values on one
 * file, E2B's own bound (ext4 keeps a file's attributes in one block). */
#define FILES_METADATA_PREFIX "user.e2b."
#define FILES_METADATA_MAX    4096
/* A file whose size says nothing of its content (procfs, sysfs) is read
 * to its end, at most this much. */
#define FILES_UNSIZED_MAX (16 * 1024 * 1024)

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
/* Replaces the metadata of the file open as fd (files_open_write's) with
 * metadata ({key: value}, checked by the caller; empty: none), acting as
 * who, through the descriptor. *persisted, when given, gets what the file
 * then holds (NULL: none). A filesystem without user attributes (tmpfs
 * before Linux 6.6) gives -EOPNOTSUPP, the file written all the same. */
int files_write_metadata(const struct sandbox *sb, enum files_user who, int fd, json_t *metadata,
                         json_t **persisted);
/* Whether the file open as fd has a stat size that says nothing of its
 * content (procfs gives 0, sysfs a page): such a file is read to its end
 * with files_read_all instead. */
bool files_size_unknown(int fd, const struct stat *st);
/* Reads fd to its end into a new buffer *data (the caller frees it), at
 * most max bytes: -EFBIG when there are more. */
int files_read_all(int fd, size_t max, char **data, size_t *len);
/* -EEXIST when it exists. Parents are created. */
int files_mkdir(const struct sandbox *sb, enum files_user who, const char *path);
/* Removes a file, or a directory with everything in it. */
int files_remove(const struct sandbox *sb, enum files_user who, const char *path);
int files_rename(const struct sandbox *sb, enum files_user who, const char *from, const char *to);

/* Whether who may resolve path, inside the sandbox, to a directory: 0 or
 * -errno. A path ending in "/." asks whether who may enter it (resolving
 * "." searches the directory itself). */
int files_enter_dir(const struct sandbox *sb, enum files_user who, const char *path);
/* E2B's EntryInfo of path (type, size, mode, permissions, owner, times,
 * symlinkTarget, metadata). */
int files_stat(const struct sandbox *sb, enum files_user who, const char *path, json_t **entry);
/* The entries below the directory path, depth levels deep, by name,
 * each followed by its own when a directory; -ENOTDIR when it is not a
 * directory. */
int files_list(const struct sandbox *sb, enum files_user who, const char *path, unsigned depth,
               json_t **entries);

/* Adds path, a directory, to the inotify instance inotify_fd with mask, as
 * who: opened inside (like every path here) and watched through its
 * descriptor. nofollow: a symlink at path is refused (-ENOTDIR). When
 * subdirs is given, appends the names of the directories in it, at most
 * max_subdirs in all. Returns the watch descriptor or -errno. */
int files_watch_dir(const struct sandbox *sb, enum files_user who, int inotify_fd, const char *path,
                    bool nofollow, uint32_t mask, json_t *subdirs, size_t max_subdirs);

/* A file operation's -errno as an HTTP status. */
int files_http_status(int error);

#endif
