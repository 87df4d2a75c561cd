#include "autoconf.h"

#include "protocol/kernelspec.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void jp_strv_free(char **v)
{
        if (!v)
                return;
        for (char **p = v; *p; p++)
                free(*p);
        free(v);
}

json_t *jp_strv_to_json(char *const *v)
{
        json_t *array = json_array();

        for (size_t i = 0; array && v && v[i]; i++) {
                if (json_array_append_new(array, json_string(v[i])) < 0) {
                        json_decref(array);
                        return NULL;
                }
        }
        return array;
}

int jp_strv_from_json(json_t *array, char ***out)
{
        size_t n = json_array_size(array);

        *out = calloc(n + 1, sizeof(char *));
        if (!*out)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                (*out)[i] = strdup(json_string_value(json_array_get(array, i)) ?: "");
                if (!(*out)[i]) {
                        jp_strv_free(*out);
                        *out = NULL;
                        return -ENOMEM;
                }
        }
        return 0;
}

int jp_strv_dup(char *const *v, char ***out)
{
        size_t n = 0;

        *out = NULL;
        if (!v)
                return 0;
        while (v[n])
                n++;
        *out = calloc(n + 1, sizeof(char *));
        if (!*out)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                (*out)[i] = strdup(v[i]);
                if (!(*out)[i]) {
                        jp_strv_free(*out);
                        *out = NULL;
                        return -ENOMEM;
                }
        }
        return 0;
}

bool jp_strv_contains(const char *const *v, const char *s)
{
        for (; v && *v; v++) {
                if (strcmp(*v, s) == 0)
                        return true;
        }
        return false;
}

static int strv_push(char ***v, size_t *n, const char *s)
{
        char **grown = realloc(*v, (*n + 2) * sizeof(char *));

        if (!grown)
                return -ENOMEM;
        *v = grown;
        grown[*n] = strdup(s);
        if (!grown[*n])
                return -ENOMEM;
        (*n)++;
        grown[*n] = NULL;
        return 0;
}

/* Pushes each non-empty entry of a ':'-separated list, with suffix added. */
static int push_list(char ***v, size_t *n, const char *list, const char *suffix)
{
        char entry[PATH_MAX];
        const char *p = list;

        while (p && *p) {
                const char *end = strchr(p, ':');
                size_t len = end ? (size_t)(end - p) : strlen(p);

                if (len > 0 && (size_t)snprintf(entry, sizeof(entry), "%.*s%s", (int)len, p,
                                                suffix) < sizeof(entry)) {
                        if (strv_push(v, n, entry) < 0)
                                return -ENOMEM;
                }
                p = end ? end + 1 : NULL;
        }
        return 0;
}

char **jp_kernelspec_search_path(const char *extra)
{
        char **v = calloc(1, sizeof(char *));
        size_t n = 0;
        const char *home = getenv("HOME");
        int rc = v ? 0 : -ENOMEM;

        if (rc == 0)
                rc = push_list(&v, &n, extra, "");
        if (rc == 0)
                rc = push_list(&v, &n, getenv("JUPYTER_PATH"), "/kernels");
        if (rc == 0 && home && *home)
                rc = push_list(&v, &n, home, "/.local/share/jupyter/kernels");
        if (rc == 0)
                rc = strv_push(&v, &n, "/usr/local/share/jupyter/kernels");
        if (rc == 0)
                rc = strv_push(&v, &n, "/usr/share/jupyter/kernels");
        if (rc < 0) {
                jp_strv_free(v);
                return NULL;
        }
        return v;
}

bool jp_env_read_at_start(const char *entry)
{
        static const char *const prefixes[] = {
            "PYTHON", "LD_",  "LC_",     "LANG=", "MPL",   "OPENBLAS",
            "OMP_",   "MKL_", "NUMEXPR", "GOTO",  "BLIS_", "JPY_"};

        if (strncmp(entry, "PYTHONPATH=", 11) == 0)
                return false;
        for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
                if (strncmp(entry, prefixes[i], strlen(prefixes[i])) == 0)
                        return true;
        }
        return false;
}

bool jp_kernelspec_name_valid(const char *name)
{
        size_t len = strlen(name);

        if (len == 0 || len >= JP_KERNELSPEC_NAME_SIZE)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = name[i];

                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-'))
                        return false;
        }
        return true;
}

int jp_kernelspec_parse(const char *json, size_t len, struct jp_kernelspec *ks, char *err,
                        size_t errlen)
{
        json_error_t jerr;
        json_t *root = json_loadb(json, len, 0, &jerr);
        json_t *argv, *v, *entry;
        size_t i;

        if (!json_is_object(root)) {
                snprintf(err, errlen, "kernel.json is not a JSON object");
                goto fail;
        }
        argv = json_object_get(root, "argv");
        if (!json_is_array(argv) || json_array_size(argv) == 0 ||
            json_array_size(argv) > JP_KERNELSPEC_MAX_ARGS) {
                snprintf(err, errlen, "\"argv\" must be a non-empty array of at most %d strings",
                         JP_KERNELSPEC_MAX_ARGS);
                goto fail;
        }
        json_array_foreach(argv, i, v) {
                if (!json_is_string(v) || json_string_length(v) == 0 ||
                    strlen(json_string_value(v)) != json_string_length(v)) {
                        snprintf(err, errlen, "\"argv\" entries must be non-empty strings");
                        goto fail;
                }
        }
        v = json_object_get(root, "display_name");
        if (!json_is_string(v)) {
                snprintf(err, errlen, "\"display_name\" must be a string");
                goto fail;
        }
        if (!json_is_string(json_object_get(root, "language")))
                json_object_set_new(root, "language", json_string(""));
        v = json_object_get(root, "env");
        if (v && !json_is_object(v)) {
                snprintf(err, errlen, "\"env\" must be an object");
                goto fail;
        }
        if (!v)
                json_object_set_new(root, "env", json_object());
        v = json_object_get(root, "interrupt_mode");
        if (v && !(json_is_string(v) && (strcmp(json_string_value(v), "signal") == 0 ||
                                         strcmp(json_string_value(v), "message") == 0))) {
                snprintf(err, errlen, "\"interrupt_mode\" must be \"signal\" or \"message\"");
                goto fail;
        }
        if (!v)
                json_object_set_new(root, "interrupt_mode", json_string("signal"));
        ks->interrupt_by_message =
            strcmp(json_string_value(json_object_get(root, "interrupt_mode")), "message") == 0;
        if (!json_is_object(json_object_get(root, "metadata")))
                json_object_set_new(root, "metadata", json_object());
        /* A template to run in (the gateway's --template). */
        v = json_object_get(json_object_get(json_object_get(root, "metadata"), "glovebox"),
                            "template");
        if (v && !(json_is_string(v) && jp_kernelspec_name_valid(json_string_value(v)))) {
                snprintf(err, errlen, "\"metadata.glovebox.template\" must be a template's name");
                goto fail;
        }
        if (v)
                snprintf(ks->template_name, sizeof(ks->template_name), "%s", json_string_value(v));
        /* Programs (or absolute paths) its kernel cannot run without. */
        v = json_object_get(json_object_get(json_object_get(root, "metadata"), "glovebox"),
                            "requires");
        if (v && !(json_is_array(v) && json_array_size(v) <= JP_KERNELSPEC_MAX_REQUIRES)) {
                snprintf(err, errlen,
                         "\"metadata.glovebox.requires\" must be an array of at most %d names",
                         JP_KERNELSPEC_MAX_REQUIRES);
                goto fail;
        }
        json_array_foreach(v, i, entry) {
                const char *need = json_string_value(entry);

                if (!need || !*need || strlen(need) >= PATH_MAX ||
                    (strchr(need, '/') && need[0] != '/')) {
                        snprintf(err, errlen,
                                 "\"metadata.glovebox.requires\" entries must be "
                                 "program names or absolute paths");
                        goto fail;
                }
        }
        ks->spec = root;
        return 0;
fail:
        json_decref(root);
        return -EINVAL;
}

static bool is_resource(const char *file)
{
        size_t len = strlen(file);

        if (strcmp(file, "kernel.js") == 0 || strcmp(file, "kernel.css") == 0)
                return true;
        return strncmp(file, "logo-", 5) == 0 && len > 9 &&
               (strcmp(file + len - 4, ".png") == 0 || strcmp(file + len - 4, ".svg") == 0);
}

static int read_small_file(const char *path, char *out, size_t size, size_t *len)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n;

        *len = 0;
        if (fd < 0)
                return -errno;
        while (*len < size) {
                n = read(fd, out + *len, size - *len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                *len += (size_t)n;
        }
        close(fd);
        return *len == size ? -EFBIG : 0;
}

/* Where a kernel's programs are looked for: the directories a sandbox has
 * (its /usr is the host's), never the gateway's own PATH. */
static const char *const program_dirs[] = {
    "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin", NULL};

/* The first of ks's metadata.glovebox.requires that is not installed, or
 * NULL when all are. */
static const char *missing_requirement(const struct jp_kernelspec *ks)
{
        json_t *requires = json_object_get(
            json_object_get(json_object_get(ks->spec, "metadata"), "glovebox"), "requires");
        char path[PATH_MAX + 32];
        json_t *v;
        size_t i;

        json_array_foreach(requires, i, v) {
                const char *need = json_string_value(v);
                bool found = need[0] == '/' && access(need, F_OK) == 0;

                for (size_t d = 0; !found && need[0] != '/' && program_dirs[d]; d++) {
                        snprintf(path, sizeof(path), "%s/%s", program_dirs[d], need);
                        found = access(path, X_OK) == 0;
                }
                if (!found)
                        return need;
        }
        return NULL;
}

static int load_one(const char *dir, const char *name, struct jp_kernelspec *ks)
{
        static char body[JP_KERNELSPEC_MAX_FILE];
        char path[PATH_MAX + 32];
        char err[160];
        size_t len, nres = 0;
        struct dirent *de;
        DIR *d;
        int rc;

        memset(ks, 0, sizeof(*ks));
        if ((size_t)snprintf(ks->dir, sizeof(ks->dir), "%s/%s", dir, name) >= sizeof(ks->dir))
                return -ENAMETOOLONG;
        if (strlen(name) >= sizeof(ks->name))
                return -ENAMETOOLONG;
        memcpy(ks->name, name, strlen(name) + 1);
        snprintf(path, sizeof(path), "%s/kernel.json", ks->dir);
        rc = read_small_file(path, body, sizeof(body), &len);
        if (rc < 0)
                return rc;
        rc = jp_kernelspec_parse(body, len, ks, err, sizeof(err));
        if (rc < 0) {
                log_warn("kernelspec %s skipped: %s", path, err);
                return rc;
        }
        /* Not served at all, rather than served and failing at every
         * start; a kernelspec of the same name further down the path is
         * found instead. */
        if (missing_requirement(ks)) {
                log_debug("kernelspec %s skipped: it needs %s, which is not installed", path,
                          missing_requirement(ks));
                return -ENOENT;
        }
        ks->resources = calloc(1, sizeof(char *));
        d = opendir(ks->dir);
        if (!ks->resources || !d) {
                if (d)
                        closedir(d);
                return ks->resources ? 0 : -ENOMEM;
        }
        while ((de = readdir(d)) != NULL) {
                if (is_resource(de->d_name) && strv_push(&ks->resources, &nres, de->d_name) < 0) {
                        closedir(d);
                        return -ENOMEM;
                }
        }
        closedir(d);
        return 0;
}

void jp_kernelspec_clear(struct jp_kernelspec *ks)
{
        json_decref(ks->spec);
        jp_strv_free(ks->resources);
        memset(ks, 0, sizeof(*ks));
}

int jp_kernelspec_discover(char *const *path, struct jp_kernelspec_list *out)
{
        out->items = NULL;
        out->count = 0;
        out->capacity = 0;
        for (size_t p = 0; path && path[p]; p++) {
                DIR *d = opendir(path[p]);
                struct dirent *de;

                if (!d)
                        continue;
                while ((de = readdir(d)) != NULL) {
                        struct jp_kernelspec ks, *grown;

                        if (de->d_name[0] == '.' || !jp_kernelspec_name_valid(de->d_name) ||
                            jp_kernelspec_find(out, de->d_name))
                                continue;
                        if (load_one(path[p], de->d_name, &ks) < 0) {
                                jp_kernelspec_clear(&ks);
                                continue;
                        }
                        grown = realloc(out->items, (out->count + 1) * sizeof(*grown));
                        if (!grown) {
                                jp_kernelspec_clear(&ks);
                                closedir(d);
                                return -ENOMEM;
                        }
                        out->items = grown;
                        out->items[out->count++] = ks;
                }
                closedir(d);
        }
        return 0;
}

int jp_kernelspec_list_append(struct jp_kernelspec_list *list, const struct jp_kernelspec *ks,
                              const char *name)
{
        struct jp_kernelspec copy = *ks, *grown;
        size_t nres = 0;
        int rc = 0;

        snprintf(copy.name, sizeof(copy.name), "%s", name);
        copy.spec = json_deep_copy(ks->spec);
        copy.resources = calloc(1, sizeof(char *));
        for (size_t i = 0; rc == 0 && copy.resources && ks->resources && ks->resources[i]; i++)
                rc = strv_push(&copy.resources, &nres, ks->resources[i]);
        /* Within the room the list was made with (its entries stay put),
         * else grown. */
        grown = rc == 0 && copy.spec && copy.resources
                    ? list->count < list->capacity
                          ? list->items
                          : realloc(list->items, (list->count + 1) * sizeof(*grown))
                    : NULL;
        if (!grown) {
                jp_kernelspec_clear(&copy);
                return -ENOMEM;
        }
        list->items = grown;
        list->items[list->count++] = copy;
        return 0;
}

void jp_kernelspec_list_free(struct jp_kernelspec_list *list)
{
        for (size_t i = 0; i < list->count; i++)
                jp_kernelspec_clear(&list->items[i]);
        free(list->items);
        list->items = NULL;
        list->count = 0;
        list->capacity = 0;
}

const struct jp_kernelspec *jp_kernelspec_find(const struct jp_kernelspec_list *list,
                                               const char *name)
{
        for (size_t i = 0; i < list->count; i++) {
                if (!list->items[i].removed && strcmp(list->items[i].name, name) == 0)
                        return &list->items[i];
        }
        return NULL;
}
