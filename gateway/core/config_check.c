#include "autoconf.h"

#include "gateway/core/config.h"
#include "gateway/core/config_private.h"
#include "gateway/core/fleet.h"
#include "gateway/core/hostcheck.h"
#include "protocol/ids.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The checks of the configuration once every option is read (config.c):
 * the listen address, the base URL, the token and its file, the allowed
 * hosts, the zygotes, and the options that exclude each other. */

/* Splits HOST:PORT (IPv6 hosts in brackets). */
static int parse_listen(struct config *cfg)
{
        const char *colon = strrchr(cfg->listen, ':');
        const char *host = cfg->listen;
        size_t hlen;
        char *end;
        long port;

        if (!colon)
                goto bad;
        hlen = (size_t)(colon - host);
        if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
                host++;
                hlen -= 2;
        }
        if (hlen == 0 || hlen >= sizeof(cfg->host))
                goto bad;
        memcpy(cfg->host, host, hlen);
        cfg->host[hlen] = '\0';
        errno = 0;
        port = strtol(colon + 1, &end, 10);
        if (errno || *end || end == colon + 1 || port < 0 || port > 65535)
                goto bad;
        cfg->port = (int)port;
        return 0;
bad:
        fprintf(stderr, "glovebox: --listen must be HOST:PORT, not '%s'\n", cfg->listen);
        return -EINVAL;
}

static bool is_loopback(const char *host)
{
        return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "::1") == 0 ||
               strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0;
}

static int normalise_base_url(struct config *cfg)
{
        size_t len = strlen(cfg->base_url);
        char *s = malloc(len + 3);

        if (!s)
                return -ENOMEM;
        snprintf(s, len + 3, "%s%s%s", cfg->base_url[0] == '/' ? "" : "/", cfg->base_url,
                 len && cfg->base_url[len - 1] == '/' ? "" : "/");
        /* "//" would otherwise come from an empty or "/" base. */
        if (strcmp(s, "//") == 0)
                s[1] = '\0';
        free(cfg->base_url);
        cfg->base_url = s;
        return 0;
}

/* A token travels in headers and URLs: printable ASCII without spaces,
 * and short enough for the buffers the headers are read into. */
static bool token_invalid(const char *token)
{
        size_t len = strlen(token);

        if (len < CONFIG_TOKEN_MIN || len > CONFIG_TOKEN_MAX) {
                fprintf(stderr, "glovebox: the token must be %d to %d characters\n",
                        CONFIG_TOKEN_MIN, CONFIG_TOKEN_MAX);
                return true;
        }
        for (size_t i = 0; i < len; i++) {
                if (token[i] <= ' ' || token[i] > '~') {
                        fprintf(stderr, "glovebox: the token must be printable ASCII without "
                                        "spaces\n");
                        return true;
                }
        }
        return false;
}

/* --token-file: the token is the file's first line, spaces around it
 * ignored. A file keeps the token out of ps, where --token shows it to
 * every user of the machine. */
static int read_token_file(struct config *cfg)
{
        /* More than a token and its line end is not a token file. */
        char text[CONFIG_TOKEN_MAX + 64];
        const char *path = cfg->token_file;
        size_t start = 0, end;
        struct stat st;
        ssize_t n;
        int rc = -EINVAL;
        int fd;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                fprintf(stderr, "glovebox: --token-file %s: %s\n", path, strerror(errno));
                return -errno;
        }
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                fprintf(stderr, "glovebox: --token-file %s: not a regular file\n", path);
                goto out;
        }
        n = read(fd, text, sizeof(text) - 1);
        if (n < 0) {
                fprintf(stderr, "glovebox: --token-file %s: %s\n", path, strerror(errno));
                goto out;
        }
        text[n] = '\0';
        end = strcspn(text, "\r\n");
        if (text[end] == '\0' && (size_t)n == sizeof(text) - 1) {
                fprintf(stderr, "glovebox: --token-file %s: the first line is longer than a "
                                "token (%d characters at most)\n", path, CONFIG_TOKEN_MAX);
                goto out;
        }
        while (start < end && (text[start] == ' ' || text[start] == '\t'))
                start++;
        while (end > start && (text[end - 1] == ' ' || text[end - 1] == '\t'))
                end--;
        text[end] = '\0';
        if (end == start) {
                fprintf(stderr, "glovebox: --token-file %s: no token in its first line\n", path);
                goto out;
        }
        if (st.st_mode & (S_IROTH | S_IWOTH))
                fprintf(stderr, "glovebox: warning: --token-file %s is readable or writable by "
                                "every user (chmod o-rw)\n", path);
        rc = config_set(cfg, "token", text + start);
        if (rc == 0)
                cfg->token_source = CONFIG_TOKEN_FILE;
out:
        /* The token is in the configuration now; no copy stays on the stack. */
        explicit_bzero(text, sizeof(text));
        close(fd);
        return rc;
}

/* Every --allow-host entry must be a host name (a port is ignored), or '*'. */
static int validate_allow_host(const char *list)
{
        const char *p = list;

        while (*p) {
                const char *comma = strchr(p, ',');
                size_t n = comma ? (size_t)(comma - p) : strlen(p);
                char entry[HOSTCHECK_MAX], name[HOSTCHECK_MAX];

                while (n && *p == ' ') {
                        p++;
                        n--;
                }
                while (n && p[n - 1] == ' ')
                        n--;
                if (n >= sizeof(entry))
                        goto bad;
                memcpy(entry, p, n);
                entry[n] = '\0';
                if (strcmp(entry, "*") != 0 && hostcheck_name(entry, name, sizeof(name)) < 0)
                        goto bad;
                if (!comma)
                        break;
                p = comma + 1;
                continue;
bad:
                fprintf(stderr, "glovebox: --allow-host: '%.*s' is not a host name\n", (int)n, p);
                return -EINVAL;
        }
        return 0;
}

#define MAX_ZYGOTES 8

/* A module may end in '?': imported only where it is installed. */
static bool zygote_char_ok(char c, bool module)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '.' || (module ? c == ',' || c == '?' : c == '-');
}

/* "none", alone, turns a list flag off: an empty list, which the defaults
 * (kernels/warm.c) leave as it is, unlike a flag never given (NULL). */
static int list_none(char **list, const char *flag)
{
        size_t n = 0;
        bool none = false;

        for (; list && list[n]; n++)
                none |= strcmp(list[n], "none") == 0;
        if (!none)
                return 0;
        if (n > 1) {
                fprintf(stderr, "glovebox: --%s none turns it off: it goes alone\n", flag);
                return -EINVAL;
        }
        free(list[0]);
        list[0] = NULL;
        return 0;
}

/* NAME:MODULE,MODULE,... with names as kernelspec names and modules as
 * dotted Python names; each kernelspec at most once. */
static int validate_zygotes(char **list)
{
        size_t n = 0;

        for (; list && list[n]; n++) {
                const char *e = list[n], *colon = strchr(e, ':');
                size_t name_len = colon ? (size_t)(colon - e) : strlen(e);

                if (n == MAX_ZYGOTES) {
                        fprintf(stderr, "glovebox: --zygote: at most %d\n", MAX_ZYGOTES);
                        return -EINVAL;
                }
                if (name_len == 0 || name_len >= 64 || (colon && strlen(colon + 1) > 1024))
                        goto bad;
                for (size_t i = 0; i < name_len; i++) {
                        if (!zygote_char_ok(e[i], false))
                                goto bad;
                }
                for (const char *m = colon ? colon + 1 : ""; *m; m++) {
                        if (!zygote_char_ok(*m, true))
                                goto bad;
                }
                for (size_t j = 0; j < n; j++) {
                        if (strncmp(list[j], e, name_len) == 0 &&
                            (list[j][name_len] == ':' || list[j][name_len] == '\0')) {
                                fprintf(stderr, "glovebox: --zygote: kernelspec %.*s twice\n",
                                        (int)name_len, e);
                                return -EINVAL;
                        }
                }
                continue;
bad:
                fprintf(stderr,
                        "glovebox: --zygote: '%s' is not NAME:MODULE,... (a kernelspec name, "
                        "then Python module names)\n",
                        e);
                return -EINVAL;
        }
        return 0;
}

bool config_has_zygote(const struct config *cfg, const char *name)
{
        size_t len = strlen(name);

        for (size_t i = 0; cfg->zygote && cfg->zygote[i]; i++) {
                if (strncmp(cfg->zygote[i], name, len) == 0 &&
                    (cfg->zygote[i][len] == ':' || cfg->zygote[i][len] == '\0'))
                        return true;
        }
        return false;
}

int config_validate(struct config *cfg)
{
        /* Only root may write /var/lib; another user names a directory. */
        if (!cfg->state_dir[0] && geteuid() == 0) {
                free(cfg->state_dir);
                cfg->state_dir = strdup("/var/lib/glovebox");
                if (!cfg->state_dir)
                        return -ENOMEM;
        }
        if (parse_listen(cfg) < 0)
                return -EINVAL;
        if (normalise_base_url(cfg) < 0)
                return -ENOMEM;
        if (strcmp(cfg->sandbox, "full") != 0 && strcmp(cfg->sandbox, "none") != 0) {
                fprintf(stderr, "glovebox: --sandbox must be 'full' or 'none'\n");
                return -EINVAL;
        }
        if (strcmp(cfg->access_log, "all") != 0 && strcmp(cfg->access_log, "errors") != 0 &&
            strcmp(cfg->access_log, "off") != 0) {
                fprintf(stderr, "glovebox: --access-log must be all, errors or off\n");
                return -EINVAL;
        }
        if (strcmp(cfg->home_storage, "memory") != 0 && strcmp(cfg->home_storage, "disk") != 0) {
                fprintf(stderr, "glovebox: --home-storage must be 'memory' or 'disk'\n");
                return -EINVAL;
        }
        if (strcmp(cfg->home_storage, "disk") == 0 && cfg->state_dir[0] != '/') {
                fprintf(stderr, "glovebox: --state-dir must be an absolute path\n");
                return -EINVAL;
        }
        if (strcmp(cfg->home_storage, "disk") == 0 && strcmp(cfg->sandbox, "full") != 0) {
                fprintf(stderr, "glovebox: --home-storage disk needs --sandbox full\n");
                return -EINVAL;
        }
        if (strcmp(cfg->home_storage, "disk") == 0 && geteuid() != 0) {
                fprintf(stderr, "glovebox: --home-storage disk needs root (it mounts a loop "
                                "device per sandbox)\n");
                return -EINVAL;
        }
        if (cfg->no_auth && !is_loopback(cfg->host)) {
                fprintf(stderr, "glovebox: --no-auth is only allowed on a loopback address\n");
                return -EINVAL;
        }
        if (cfg->memory_mb > cfg->max_memory_mb || cfg->cpus > cfg->max_cpus ||
            cfg->pids > cfg->max_pids || cfg->disk_mb > cfg->max_disk_mb) {
                fprintf(stderr, "glovebox: a default limit is above its --max-* maximum\n");
                return -EINVAL;
        }
        if (!!*cfg->certfile != !!*cfg->keyfile) {
                fprintf(stderr, "glovebox: --certfile and --keyfile go together\n");
                return -EINVAL;
        }
        if (*cfg->token_file) {
                if (cfg->token_source == CONFIG_TOKEN_ARGV ||
                    cfg->token_source == CONFIG_TOKEN_CONFIG) {
                        fprintf(stderr, "glovebox: give the token once: --token or --token-file\n");
                        return -EINVAL;
                }
                if (read_token_file(cfg) < 0)
                        return -EINVAL;
        }
        if (cfg->token && token_invalid(cfg->token))
                return -EINVAL;
        if (cfg->no_auth)
                cfg->token_source = CONFIG_TOKEN_NONE;
        if (validate_allow_host(cfg->allow_host) < 0)
                return -EINVAL;
        if (*cfg->ports_domain) {
                char name[HOSTCHECK_MAX];

                if (hostcheck_name(cfg->ports_domain, name, sizeof(name)) < 0 || !name[0] ||
                    strchr(cfg->ports_domain, '/')) {
                        fprintf(stderr, "glovebox: --ports-domain: '%s' is not a host name\n",
                                cfg->ports_domain);
                        return -EINVAL;
                }
        }
        if (list_none(cfg->zygote, "zygote") < 0 || list_none(cfg->pool, "pool") < 0)
                return -EINVAL;
        if (fleet_configure(cfg) < 0 || validate_zygotes(cfg->zygote) < 0)
                return -EINVAL;
        if (cfg->no_auth && *cfg->keys_file) {
                fprintf(stderr, "glovebox: --no-auth and --keys-file exclude each other\n");
                return -EINVAL;
        }
        /* With a keys file, the keys are the credentials: no token is made
         * up beside them. */
        if (!cfg->token && !cfg->no_auth && !*cfg->keys_file) {
                /* E2B's form, "e2b_" and hex digits, so that the E2B SDKs
                 * (the Python one checks the form before sending) take the
                 * generated token as an API key as it is. */
                char token[4 + 48 + 1] = "e2b_";

                if (jp_random_hex(token + 4, 24) < 0)
                        return -EIO;
                cfg->token = strdup(token);
                cfg->token_source = CONFIG_TOKEN_GENERATED;
                if (!cfg->token)
                        return -ENOMEM;
        }
        return 0;
}

