#include "autoconf.h"

#include "gateway/kernels/specs.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_RO_PATHS 64

static struct jp_kernelspec_list *list;
static char **search_path;
static const char *own_dir; /* Glovebox's own kernels: an entry of search_path */
static uint64_t stamp;
static char **ro_paths;

/* What a language's runtime reads outside /usr on Debian, bound into every
 * sandbox when a kernelspec of that language is installed: R reads
 * /etc/R/ldpaths, Renviron and Rprofile.site at every start (its
 * /usr/lib/R/etc is a link there); a JVM reads its security and logging
 * configuration from /etc/java-N-openjdk. */
static const struct {
        const char *language;
        const char *paths[4];
} language_paths[] = {
    {"r", {"/etc/R", NULL}},
    {"java", {"/etc/java-17-openjdk", "/etc/java-21-openjdk", "/etc/ssl/certs/java", NULL}},
};

/* Host paths a kernelspec may not ask for: binding over them would hide
 * what the sandbox itself mounts there (its /proc, /dev, disk, home and
 * the kernel's sockets), or expose the host's kernel interfaces. */
static const char *const refused_prefixes[] = {"/proc", "/dev", "/sys",  "/tmp",
                                               "/home", "/run", "/root", "/var/run"};

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
        const unsigned char *p = data;

        for (size_t i = 0; i < n; i++) {
                h ^= p[i];
                h *= 1099511628211ULL;
        }
        return h;
}

static uint64_t fnv_stat(uint64_t h, const char *path)
{
        struct stat st;
        int64_t v[4] = {-1, 0, 0, 0};

        if (stat(path, &st) == 0) {
                v[0] = (int64_t)st.st_ino;
                v[1] = (int64_t)st.st_size;
                v[2] = (int64_t)st.st_mtim.tv_sec;
                v[3] = (int64_t)st.st_mtim.tv_nsec;
        }
        return fnv(h, v, sizeof(v));
}

/* A digest of what discovery would read: each directory of the search
 * path, and each kernel.json in it. Adding, removing or rewriting a
 * kernelspec changes one of them. */
static uint64_t compute_stamp(void)
{
        uint64_t h = 14695981039346656037ULL;
        char path[PATH_MAX + 300];

        for (size_t i = 0; search_path && search_path[i]; i++) {
                DIR *d = opendir(search_path[i]);
                struct dirent *de;

                h = fnv_stat(h, search_path[i]);
                if (!d)
                        continue;
                while ((de = readdir(d)) != NULL) {
                        if (de->d_name[0] == '.')
                                continue;
                        snprintf(path, sizeof(path), "%s/%s/kernel.json", search_path[i],
                                 de->d_name);
                        h = fnv(h, de->d_name, strlen(de->d_name));
                        h = fnv_stat(h, path);
                }
                closedir(d);
        }
        return h;
}

static bool refused_path(const char *path)
{
        if (path[0] != '/' || strcmp(path, "/") == 0 || strstr(path, "/..") || strstr(path, "//") ||
            strlen(path) >= PATH_MAX)
                return true;
        for (size_t i = 0; i < sizeof(refused_prefixes) / sizeof(refused_prefixes[0]); i++) {
                size_t n = strlen(refused_prefixes[i]);

                if (strncmp(path, refused_prefixes[i], n) == 0 &&
                    (path[n] == '\0' || path[n] == '/'))
                        return true;
        }
        return false;
}

/* Adds path to *v; a path a kernelspec declares (declared) must not be
 * one the sandbox mounts itself. */
static int add_ro_path(char ***v, size_t *n, const char *path, const char *why, bool declared)
{
        struct stat st;
        char **grown;

        /* /usr is bound whole already. */
        if (strncmp(path, "/usr/", 5) == 0 || jp_strv_contains((const char *const *)*v, path))
                return 0;
        if (declared ? refused_path(path) : path[0] != '/' || strcmp(path, "/") == 0) {
                log_warn("kernelspec %s: read-only path %s refused", why, path);
                return 0;
        }
        if (stat(path, &st) < 0)
                return 0;
        if (*n >= MAX_RO_PATHS) {
                log_warn("kernelspec %s: more than %d read-only paths; %s skipped", why,
                         MAX_RO_PATHS, path);
                return 0;
        }
        grown = realloc(*v, (*n + 2) * sizeof(char *));
        if (!grown)
                return -ENOMEM;
        *v = grown;
        grown[*n] = strdup(path);
        if (!grown[*n])
                return -ENOMEM;
        grown[++*n] = NULL;
        return 0;
}

bool specs_tcp_only(const struct jp_kernelspec *ks)
{
        static const char *const programs[] = {"ijskernel", "ijavascript", "tslab", NULL};
        const char *transport = json_string_value(json_object_get(
            json_object_get(json_object_get(ks->spec, "metadata"), "glovebox"), "transport"));
        json_t *argv = json_object_get(ks->spec, "argv"), *arg;
        size_t i;

        if (transport)
                return strcmp(transport, "tcp") == 0;
        json_array_foreach(argv, i, arg) {
                const char *a = json_string_value(arg);
                const char *base = strrchr(a, '/') ? strrchr(a, '/') + 1 : a;
                char name[64];

                snprintf(name, sizeof(name), "%s", base);
                if (strlen(name) > 3 && strcmp(name + strlen(name) - 3, ".js") == 0)
                        name[strlen(name) - 3] = '\0';
                if (jp_strv_contains(programs, name) || strstr(a, "/ijavascript/") ||
                    strstr(a, "/tslab/"))
                        return true;
        }
        return false;
}

char specs_ipc_separator(const struct jp_kernelspec *ks)
{
        const char *naming = json_string_value(json_object_get(
            json_object_get(json_object_get(ks->spec, "metadata"), "glovebox"), "ipc_naming"));

        return naming && strcmp(naming, "ip:port") == 0 ? ':' : '-';
}

/* Where the gateway's kernel-host is, glovebox-kernel-bridge is: beside
 * the gateway in a build tree, else in the library directory. */
static void bridge_path(char *out, size_t size)
{
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        char *slash;

        if (n > 0) {
                self[n] = '\0';
                slash = strrchr(self, '/');
                if (slash) {
                        *slash = '\0';
                        if ((size_t)snprintf(out, size, "%s/glovebox-kernel-bridge", self) < size &&
                            access(out, X_OK) == 0)
                                return;
                }
        }
        snprintf(out, size, "%s/glovebox-kernel-bridge", GLOVEBOX_LIBEXECDIR);
}

static int build_ro_paths(void)
{
        char **v = calloc(1, sizeof(char *));
        size_t n = 0;
        int rc = v ? 0 : -ENOMEM;
        bool bridge = false;

        /* Whole: one of Glovebox's kernels may run another's program
         * (typescript runs javascript's), listed or not. */
        if (rc == 0 && own_dir)
                rc = add_ro_path(&v, &n, own_dir, "glovebox's own", false);
        for (size_t i = 0; rc == 0 && i < list->count; i++) {
                const struct jp_kernelspec *ks = &list->items[i];
                json_t *declared = json_object_get(
                    json_object_get(json_object_get(ks->spec, "metadata"), "glovebox"),
                    "read_only_paths");
                char language[32];
                json_t *p;
                size_t j;

                if (ks->removed)
                        continue;
                bridge = bridge || specs_tcp_only(ks);
                if (!own_dir || strncmp(ks->dir, own_dir, strlen(own_dir)) != 0 ||
                    ks->dir[strlen(own_dir)] != '/')
                        rc = add_ro_path(&v, &n, ks->dir, ks->name, false);
                json_array_foreach(declared, j, p) {
                        if (rc == 0 && json_is_string(p))
                                rc = add_ro_path(&v, &n, json_string_value(p), ks->name, true);
                }
                if (!specs_language_name(json_string_value(json_object_get(ks->spec, "language")),
                                         language, sizeof(language)))
                        continue;
                for (size_t l = 0; l < sizeof(language_paths) / sizeof(language_paths[0]); l++) {
                        if (strcmp(language_paths[l].language, language) != 0)
                                continue;
                        for (j = 0; rc == 0 && language_paths[l].paths[j]; j++)
                                rc =
                                    add_ro_path(&v, &n, language_paths[l].paths[j], ks->name, true);
                }
        }
        if (rc == 0 && bridge) {
                char path[PATH_MAX];

                bridge_path(path, sizeof(path));
                rc = add_ro_path(&v, &n, path, "glovebox-kernel-bridge", false);
        }
        if (rc < 0) {
                jp_strv_free(v);
                return rc;
        }
        jp_strv_free(ro_paths);
        ro_paths = v;
        return 0;
}

/* Merges a fresh discovery into the list without moving an entry. */
static void merge(struct jp_kernelspec_list *found)
{
        bool *taken = calloc(found->count + 1, sizeof(bool));

        if (!taken)
                return;
        for (size_t i = 0; i < list->count; i++) {
                struct jp_kernelspec *ks = &list->items[i];
                size_t j;

                for (j = 0; j < found->count; j++) {
                        if (strcmp(found->items[j].name, ks->name) == 0)
                                break;
                }
                /* A template's kernels are not on the search path:
                 * templates_init added them, and they stay. */
                if (j == found->count && ks->template_name[0])
                        continue;
                if (j == found->count) {
                        if (!ks->removed)
                                log_info("kernelspec %s removed", ks->name);
                        ks->removed = true;
                        continue;
                }
                taken[j] = true;
                if (!ks->removed && strcmp(ks->dir, found->items[j].dir) == 0 &&
                    json_equal(ks->spec, found->items[j].spec))
                        continue;
                log_info("kernelspec %s %s in %s", ks->name, ks->removed ? "back" : "changed",
                         found->items[j].dir);
                jp_kernelspec_clear(ks);
                *ks = found->items[j];
                memset(&found->items[j], 0, sizeof(found->items[j]));
        }
        for (size_t j = 0; j < found->count; j++) {
                if (taken[j])
                        continue;
                if (list->count >= SPECS_MAX) {
                        log_warn("kernelspec %s skipped: more than %d kernelspecs",
                                 found->items[j].name, SPECS_MAX);
                        continue;
                }
                log_info("kernelspec %s in %s", found->items[j].name, found->items[j].dir);
                list->items[list->count++] = found->items[j];
                memset(&found->items[j], 0, sizeof(found->items[j]));
        }
        free(taken);
}

/* Glovebox's own kernels: the source tree's when run from its build tree,
 * else the installed ones. An installed glovebox never reads the source
 * tree it was built in, even where that tree remains: it may have changed
 * since, or be someone else's. */
static char *own_kernels_dir(void)
{
        char *path = program_in_build_tree() ? realpath(GLOVEBOX_SRCDIR "/kernels", NULL) : NULL;
        struct stat st;

        if (path && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
                return path;
        free(path);
        return strdup(GLOVEBOX_DATADIR "/kernels");
}

int specs_init(const char *extra, struct jp_kernelspec_list *out)
{
        struct jp_kernelspec_list found;
        size_t n = 0, at;
        char **grown;
        int rc;

        search_path = jp_kernelspec_search_path(extra);
        if (!search_path)
                return -ENOMEM;
        while (search_path[n])
                n++;
        grown = realloc(search_path, (n + 2) * sizeof(char *));
        if (!grown)
                return -ENOMEM;
        search_path = grown;
        /* Glovebox's own kernels come before the system-wide directories:
         * its javascript (ijavascript made to take TypeScript, imports and
         * top-level await, as E2B's is) takes the place of the one
         * ijavascript installs; the operator's --kernelspec-path,
         * JUPYTER_PATH and ~/.local still come first. */
        at = n;
        for (size_t i = 0; i < n; i++) {
                if (strcmp(search_path[i], "/usr/local/share/jupyter/kernels") == 0 ||
                    strcmp(search_path[i], "/usr/share/jupyter/kernels") == 0) {
                        at = i;
                        break;
                }
        }
        memmove(&search_path[at + 1], &search_path[at], (n + 1 - at) * sizeof(char *));
        search_path[at] = own_kernels_dir();
        if (!search_path[at])
                return -ENOMEM;
        own_dir = search_path[at];
        out->count = 0;
        out->items = calloc(SPECS_MAX, sizeof(*out->items));
        if (!out->items)
                return -ENOMEM;
        /* Templates add theirs in this room too (templates_init). */
        out->capacity = SPECS_MAX;
        list = out;
        stamp = compute_stamp();
        rc = jp_kernelspec_discover(search_path, &found);
        if (rc < 0)
                return rc;
        merge(&found);
        jp_kernelspec_list_free(&found);
        return build_ro_paths();
}

void specs_refresh(void)
{
        struct jp_kernelspec_list found;
        uint64_t now;

        if (!list)
                return;
        now = compute_stamp();
        if (now == stamp)
                return;
        stamp = now;
        if (jp_kernelspec_discover(search_path, &found) < 0) {
                jp_kernelspec_list_free(&found);
                return;
        }
        merge(&found);
        jp_kernelspec_list_free(&found);
        if (build_ro_paths() < 0)
                log_warn("kernelspecs: out of memory for the read-only paths");
}

char *const *specs_ro_paths(void)
{
        return ro_paths;
}

bool specs_language_name(const char *language, char *out, size_t size)
{
        size_t n = language ? strlen(language) : 0;

        if (n == 0 || n >= size || size < 16)
                return false;
        for (size_t i = 0; i <= n; i++)
                out[i] = (char)tolower((unsigned char)language[i]);
        if (strcmp(out, "js") == 0)
                snprintf(out, size, "javascript");
        else if (strcmp(out, "ts") == 0)
                snprintf(out, size, "typescript");
        return true;
}

bool specs_speaks(const struct jp_kernelspec *ks, const char *language)
{
        char own[32];

        return !ks->removed &&
               specs_language_name(json_string_value(json_object_get(ks->spec, "language")), own,
                                   sizeof(own)) &&
               strcmp(own, language) == 0;
}

const struct jp_kernelspec *specs_for_language(const char *language, const char *default_kernel)
{
        const struct jp_kernelspec *dflt;

        specs_refresh();
        dflt = jp_kernelspec_find(list, default_kernel);
        if (dflt && specs_speaks(dflt, language))
                return dflt;
        /* One named after the language first (ijavascript's "javascript"
         * before tslab's "jslab"), so the choice does not follow the
         * order of directory entries. */
        for (size_t i = 0; i < list->count; i++) {
                if (specs_speaks(&list->items[i], language) && strcmp(list->items[i].name, language) == 0)
                        return &list->items[i];
        }
        for (size_t i = 0; i < list->count; i++) {
                if (specs_speaks(&list->items[i], language))
                        return &list->items[i];
        }
        return NULL;
}

void specs_languages(char *out, size_t size)
{
        size_t n = 0;

        out[0] = '\0';
        for (size_t i = 0; i < list->count && n < size; i++) {
                char own[32], key[40];

                if (list->items[i].removed ||
                    !specs_language_name(
                        json_string_value(json_object_get(list->items[i].spec, "language")), own,
                        sizeof(own)))
                        continue;
                snprintf(key, sizeof(key), ", %s,", own);
                /* Each language once. */
                if (n > 0) {
                        char seen[1024];

                        snprintf(seen, sizeof(seen), ", %s,", out);
                        if (strstr(seen, key))
                                continue;
                }
                n += (size_t)snprintf(out + n, size - n, "%s%s", n ? ", " : "", own);
        }
}

void specs_free(void)
{
        jp_strv_free(search_path);
        search_path = NULL;
        own_dir = NULL;
        jp_strv_free(ro_paths);
        ro_paths = NULL;
        list = NULL;
}
