/* Kernelspec discovery, as jupyter_client finds them: every directory of
 * the search path holds one sub-directory per kernel with a kernel.json;
 * the first directory that has a name wins. */
#ifndef GLOVEBOX_KERNELSPEC_H
#define GLOVEBOX_KERNELSPEC_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define JP_KERNELSPEC_NAME_SIZE 64
#define JP_KERNELSPEC_MAX_FILE  (64 * 1024)
#define JP_KERNELSPEC_MAX_ARGS  64
/* metadata.glovebox.requires: the programs (names looked up in /usr and
 * /bin, or absolute paths) a kernelspec's kernel needs; one that is not
 * installed leaves the kernelspec out of discovery. */
#define JP_KERNELSPEC_MAX_REQUIRES 16

struct jp_kernelspec {
        char name[JP_KERNELSPEC_NAME_SIZE];
        char dir[PATH_MAX];
        json_t *spec;            /* kernel.json, validated; owned */
        bool interrupt_by_message; /* "interrupt_mode": "message" */
        char **resources;        /* NULL-terminated file names: logos, kernel.js/css */
        /* The template its kernels run in, "" for none: its kernel.json's
         * metadata.glovebox.template, or the template it came with. */
        char template_name[JP_KERNELSPEC_NAME_SIZE];
        /* In a template's tree, the length of the tree's path at the start
         * of dir: dir + root_len is the directory as its sandbox sees it. */
        size_t root_len;
        bool removed; /* gone from disk since it was found: kept for what uses it, never found */
};

struct jp_kernelspec_list {
        struct jp_kernelspec *items;
        size_t count;
        size_t capacity; /* items made room for; 0: as many as count */
};

/* Builds the search path: extra (a ':'-separated list, may be NULL), then
 * $JUPYTER_PATH entries + "/kernels", ~/.local/share/jupyter/kernels,
 * /usr/local/share/jupyter/kernels, /usr/share/jupyter/kernels.
 * Returns a NULL-terminated array the caller frees with jp_strv_free. */
char **jp_kernelspec_search_path(const char *extra);
void jp_strv_free(char **v);
/* A copy of the NULL-terminated v into *out (NULL for NULL). 0 or -ENOMEM. */
int jp_strv_dup(char *const *v, char ***out);
/* The NULL-terminated v (NULL: none) as a JSON array of its strings, as
 * state records keep an environment; NULL when out of memory. */
json_t *jp_strv_to_json(char *const *v);
/* Such an array back, as a NULL-terminated copy into *out (what is not a
 * string becomes ""; anything but an array, no entries). 0 or -ENOMEM. */
int jp_strv_from_json(json_t *array, char ***out);
/* Whether the NULL-terminated v holds s. */
bool jp_strv_contains(const char *const *v, const char *s);

/* Loads every valid kernelspec under the directories of path (the first of
 * a name wins); invalid ones are skipped with a warning. 0 or -ENOMEM. */
int jp_kernelspec_discover(char *const *path, struct jp_kernelspec_list *out);
void jp_kernelspec_list_free(struct jp_kernelspec_list *list);
/* Frees what ks owns and zeroes it. */
void jp_kernelspec_clear(struct jp_kernelspec *ks);
/* The kernelspec of that name that is not removed, or NULL. */
const struct jp_kernelspec *jp_kernelspec_find(const struct jp_kernelspec_list *list,
                                               const char *name);

/* Validates a kernel.json body for kernel name; on success stores the parsed
 * spec in ks (which owns it). -EINVAL with a reason in err otherwise. */
int jp_kernelspec_parse(const char *json, size_t len, struct jp_kernelspec *ks, char *err,
                        size_t errlen);
/* Whether the "NAME=value" entry of a Python kernel's environment is one
 * the interpreter or a module it has loaded reads only as it starts
 * (PYTHON*, LD_*, locales, thread counts of numerical libraries, ...):
 * such a variable cannot be given to a kernel already running (a zygote's
 * or the pool's). PYTHONPATH is not one: it is put in sys.path. */
bool jp_env_read_at_start(const char *entry);
/* Kernel names: 1-63 of [A-Za-z0-9._-], as jupyter_client accepts. */
bool jp_kernelspec_name_valid(const char *name);
/* Appends a copy of ks (its spec and resources too) to list, named name.
 * 0 or -ENOMEM. The list's items may move. */
int jp_kernelspec_list_append(struct jp_kernelspec_list *list, const struct jp_kernelspec *ks,
                              const char *name);

#endif
