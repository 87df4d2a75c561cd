/* The bodies of protocol/hostmsg.h's messages: each type's JSON encoder,
 * and its decoder, which checks every field against its bounds. */
#include "autoconf.h"

#include "protocol/hostmsg.h"
#include "protocol/egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies a string member into out; -EBADMSG when missing, not a string,
 * containing NUL, or not fitting. */
static int get_str(json_t *o, const char *key, char *out, size_t size)
{
        json_t *v = json_object_get(o, key);
        size_t len;

        if (!json_is_string(v))
                return -EBADMSG;
        len = json_string_length(v);
        if (len >= size || strlen(json_string_value(v)) != len)
                return -EBADMSG;
        memcpy(out, json_string_value(v), len + 1);
        return 0;
}

static int get_int(json_t *o, const char *key, long long min, long long max, long long *out)
{
        json_t *v = json_object_get(o, key);

        if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
                return -EBADMSG;
        *out = json_integer_value(v);
        return 0;
}

static int get_id(json_t *o, const char *key, char id[JP_UUID_SIZE])
{
        int rc = get_str(o, key, id, JP_UUID_SIZE);

        if (rc == 0 && !jp_uuid_valid(id, strlen(id)))
                rc = -EBADMSG;
        return rc;
}

static json_t *strv_encode(char *const *v)
{
        json_t *a = json_array();

        for (size_t i = 0; a && v && v[i]; i++)
                json_array_append_new(a, json_string(v[i]));
        return a;
}

static int strv_decode(json_t *a, size_t max, int need_equals, char ***out)
{
        size_t n = json_array_size(a);
        json_t *v;
        size_t i;

        *out = NULL;
        if (!json_is_array(a) || n > max)
                return -EBADMSG;
        *out = calloc(n + 1, sizeof(char *));
        if (!*out)
                return -ENOMEM;
        json_array_foreach(a, i, v) {
                const char *s = json_string_value(v);

                if (!s || json_string_length(v) > HOSTMSG_MAX_STRING ||
                    strlen(s) != json_string_length(v) || (need_equals && !strchr(s, '=')))
                        return -EBADMSG;
                (*out)[i] = strdup(s);
                if (!(*out)[i])
                        return -ENOMEM;
        }
        return 0;
}

static int get_limits(json_t *limits, struct hostmsg_limits *out)
{
        long long memory = 0, cpu = 0, pids = 0, disk = 0;
        int rc = json_is_object(limits) ? 0 : -EBADMSG;

        if (rc == 0)
                rc = get_int(limits, "memory_mb", 1, 1 << 24, &memory);
        if (rc == 0)
                rc = get_int(limits, "cpu_millis", 1, 1 << 20, &cpu);
        if (rc == 0)
                rc = get_int(limits, "pids", 1, 1 << 22, &pids);
        if (rc == 0)
                rc = get_int(limits, "disk_mb", 1, 1 << 24, &disk);
        if (rc == 0)
                *out = (struct hostmsg_limits){(uint64_t)memory, (uint32_t)cpu, (uint32_t)pids,
                                               (uint64_t)disk};
        return rc;
}

static json_t *limits_encode(const struct hostmsg_limits *l)
{
        return json_pack("{s:I, s:I, s:I, s:I}", "memory_mb", (json_int_t)l->memory_mb,
                         "cpu_millis", (json_int_t)l->cpu_millis, "pids", (json_int_t)l->pids,
                         "disk_mb", (json_int_t)l->disk_mb);
}

static void strv_clear(char ***v)
{
        for (size_t i = 0; *v && (*v)[i]; i++)
                free((*v)[i]);
        free(*v);
        *v = NULL;
}

/* A message's "volumes" (absent: none), each "id:/path" checked. */
static int volumes_decode(json_t *body, char ***out)
{
        int rc = 0;

        if (json_object_get(body, "volumes"))
                rc = strv_decode(json_object_get(body, "volumes"), HOSTMSG_MAX_VOLUMES, 0, out);
        for (size_t i = 0; rc == 0 && *out && (*out)[i]; i++) {
                char id[JP_UUID_SIZE];
                const char *path;

                if (!hostmsg_volume_mount_split((*out)[i], id, &path))
                        rc = -EBADMSG;
        }
        return rc;
}

/* Only an enabled network is sent: a sandbox without one is described
 * exactly as before egress existed. */
json_t *hostmsg_network_encode(const struct hostmsg_network *n)
{
        json_t *o =
            json_pack("{s:o, s:o, s:s, s:I, s:I}", "allow", strv_encode(n->allow), "deny",
                      strv_encode(n->deny), "dns", n->dns, "rate_kib", (json_int_t)n->rate_kib,
                      "max_connections", (json_int_t)n->max_connections);

        if (o && n->opened && n->opened[0])
                json_object_set_new(o, "opened", strv_encode(n->opened));
        return o;
}

static bool rules_valid(char **rules)
{
        struct egress_rule rule;

        for (size_t i = 0; rules[i]; i++) {
                if (egress_rule_parse(rules[i], &rule) < 0)
                        return false;
        }
        return true;
}

/* The upstream resolver: an IPv4 address, optionally "#port". */
static bool dns_valid(const char *dns)
{
        char addr[INET_ADDRSTRLEN];
        const char *hash = strchr(dns, '#');
        size_t len = hash ? (size_t)(hash - dns) : strlen(dns);
        struct in_addr in;

        if (len == 0 || len >= sizeof(addr))
                return false;
        memcpy(addr, dns, len);
        addr[len] = '\0';
        if (inet_pton(AF_INET, addr, &in) != 1)
                return false;
        if (hash) {
                size_t digits = strspn(hash + 1, "0123456789");

                if (digits == 0 || digits > 5 || hash[1 + digits] ||
                    strtol(hash + 1, NULL, 10) > 65535)
                        return false;
        }
        return true;
}

int hostmsg_network_decode(json_t *o, struct hostmsg_network *n)
{
        long long rate = 0, conns = 0;
        int rc = json_is_object(o) ? 0 : -EBADMSG;

        if (rc == 0)
                rc = strv_decode(json_object_get(o, "allow"), EGRESS_MAX_RULES, 0, &n->allow);
        if (rc == 0)
                rc = strv_decode(json_object_get(o, "deny"), EGRESS_MAX_RULES * 2, 0, &n->deny);
        if (rc == 0 && json_object_get(o, "opened"))
                rc = strv_decode(json_object_get(o, "opened"), EGRESS_MAX_RULES, 0, &n->opened);
        if (rc == 0)
                rc = get_str(o, "dns", n->dns, sizeof(n->dns));
        if (rc == 0)
                rc = get_int(o, "rate_kib", 0, 1 << 30, &rate);
        if (rc == 0)
                rc = get_int(o, "max_connections", 0, 1 << 20, &conns);
        if (rc == 0 &&
            (!rules_valid(n->allow) || !rules_valid(n->deny) ||
             (n->opened && !rules_valid(n->opened)) || (n->dns[0] && !dns_valid(n->dns))))
                rc = -EBADMSG;
        n->rate_kib = (uint32_t)rate;
        n->max_connections = (uint32_t)conns;
        n->enabled = rc == 0;
        return rc;
}

void hostmsg_network_clear(struct hostmsg_network *n)
{
        strv_clear(&n->allow);
        strv_clear(&n->deny);
        strv_clear(&n->opened);
        n->enabled = false;
}

static const struct {
        enum hostmsg_controller bit;
        const char *name;
} controllers[] = {{HOSTMSG_CONTROLLER_MEMORY, "memory"},
                   {HOSTMSG_CONTROLLER_PIDS, "pids"},
                   {HOSTMSG_CONTROLLER_CPU, "cpu"}};

#define NCONTROLLERS (sizeof(controllers) / sizeof(controllers[0]))

const char *hostmsg_controller_name(enum hostmsg_controller c)
{
        for (size_t i = 0; i < NCONTROLLERS; i++) {
                if (controllers[i].bit == c)
                        return controllers[i].name;
        }
        return NULL;
}

json_t *hostmsg_hello_encode(const struct hostmsg_hello *m)
{
        json_t *list = json_array();

        for (size_t i = 0; list && i < NCONTROLLERS; i++) {
                if (m->controllers & controllers[i].bit)
                        json_array_append_new(list, json_string(controllers[i].name));
        }
        return list ? json_pack("{s:o, s:b, s:s}", "controllers", list, "checkpoints",
                                m->checkpoints, "checkpoint_off", m->checkpoint_off)
                    : NULL;
}

/* Every name must be known and none repeated: a controller the gateway
 * does not know of is one whose limit it cannot ask for. */
int hostmsg_hello_decode(json_t *body, struct hostmsg_hello *m)
{
        json_t *list = json_object_get(body, "controllers");
        json_t *v;
        size_t i;

        m->controllers = 0;
        m->checkpoints = json_is_true(json_object_get(body, "checkpoints"));
        m->checkpoint_off[0] = '\0';
        if (json_is_string(json_object_get(body, "checkpoint_off")))
                snprintf(m->checkpoint_off, sizeof(m->checkpoint_off), "%s",
                         json_string_value(json_object_get(body, "checkpoint_off")));
        if (!json_is_array(list) || json_array_size(list) > NCONTROLLERS)
                return -EBADMSG;
        json_array_foreach(list, i, v) {
                const char *name = json_string_value(v);
                size_t k = 0;

                while (name && k < NCONTROLLERS && strcmp(controllers[k].name, name) != 0)
                        k++;
                if (!name || k == NCONTROLLERS || (m->controllers & controllers[k].bit)) {
                        m->controllers = 0;
                        return -EBADMSG;
                }
                m->controllers |= controllers[k].bit;
        }
        return 0;
}

json_t *hostmsg_sandbox_encode(const struct hostmsg_sandbox *m)
{
        json_t *body = json_pack("{s:s, s:o, s:o, s:b}", "sandbox_id", m->sandbox_id, "limits",
                                 limits_encode(&m->limits), "ro_paths", strv_encode(m->ro_paths),
                                 "sandbox", m->sandbox);

        /* Only a template's sandbox says it. */
        if (body && m->template_root[0] &&
            json_object_set_new(body, "template_root", json_string(m->template_root)) < 0) {
                json_decref(body);
                body = NULL;
        }
        if (body && m->network.enabled)
                json_object_set_new(body, "network", hostmsg_network_encode(&m->network));
        if (body && m->layers && m->layers[0])
                json_object_set_new(body, "layers", strv_encode(m->layers));
        if (body && m->build_layer[0]) {
                json_object_set_new(body, "build_layer", json_string(m->build_layer));
                json_object_set_new(body, "build_layer_mb",
                                    json_integer((json_int_t)m->build_layer_mb));
        }
        if (body && m->volumes && m->volumes[0])
                json_object_set_new(body, "volumes", strv_encode(m->volumes));
        if (body && m->tenant[0])
                json_object_set_new(body, "tenant", json_string(m->tenant));
        return body;
}

/* A template's tree: an absolute, plain path, without a character that
 * overlayfs's options would read as a separator. */
static bool template_root_valid(const char *path)
{
        return path[0] == '/' && !strstr(path, "/..") && !strpbrk(path, ",:\\\n") &&
               strlen(path) < PATH_MAX;
}

int hostmsg_sandbox_decode(json_t *body, struct hostmsg_sandbox *m)
{
        json_t *sandbox = json_object_get(body, "sandbox");
        json_t *template = json_object_get(body, "template_root");
        int rc;

        memset(m, 0, sizeof(*m));
        rc = get_id(body, "sandbox_id", m->sandbox_id);
        if (rc == 0)
                rc = get_limits(json_object_get(body, "limits"), &m->limits);
        if (rc == 0)
                rc = strv_decode(json_object_get(body, "ro_paths"), HOSTMSG_MAX_RO_PATHS, 0,
                                 &m->ro_paths);
        for (size_t i = 0; rc == 0 && m->ro_paths[i]; i++) {
                /* Absolute and plain: no ".." can take a bind elsewhere. */
                if (m->ro_paths[i][0] != '/' || strstr(m->ro_paths[i], "/..") ||
                    strlen(m->ro_paths[i]) >= PATH_MAX)
                        rc = -EBADMSG;
        }
        if (rc == 0 && !json_is_boolean(sandbox))
                rc = -EBADMSG;
        if (rc == 0 && json_object_get(body, "network"))
                rc = hostmsg_network_decode(json_object_get(body, "network"), &m->network);
        if (rc == 0 && template) {
                if (!json_is_string(template) || !template_root_valid(json_string_value(template)))
                        rc = -EBADMSG;
                else
                        snprintf(m->template_root, sizeof(m->template_root), "%s",
                                 json_string_value(template));
        }
        /* Layer ids name files: UUIDs only. */
        if (rc == 0 && json_object_get(body, "layers"))
                rc =
                    strv_decode(json_object_get(body, "layers"), HOSTMSG_MAX_LAYERS, 0, &m->layers);
        for (size_t i = 0; rc == 0 && m->layers && m->layers[i]; i++) {
                if (!jp_uuid_valid(m->layers[i], strlen(m->layers[i])))
                        rc = -EBADMSG;
        }
        if (rc == 0 && json_object_get(body, "build_layer")) {
                long long mb = 0;

                rc = get_id(body, "build_layer", m->build_layer);
                if (rc == 0)
                        rc = get_int(body, "build_layer_mb", 1, 1ll << 30, &mb);
                m->build_layer_mb = (uint64_t)mb;
        }
        if (rc == 0)
                rc = volumes_decode(body, &m->volumes);
        if (rc == 0 && json_object_get(body, "tenant")) {
                const char *tenant = json_string_value(json_object_get(body, "tenant"));

                if (!tenant || !jp_share_name_valid(tenant))
                        rc = -EBADMSG;
                else
                        snprintf(m->tenant, sizeof(m->tenant), "%s", tenant);
        }
        if (rc < 0) {
                hostmsg_sandbox_clear(m);
                return rc;
        }
        m->sandbox = json_is_true(sandbox);
        return 0;
}

void hostmsg_sandbox_clear(struct hostmsg_sandbox *m)
{
        strv_clear(&m->ro_paths);
        strv_clear(&m->layers);
        strv_clear(&m->volumes);
        hostmsg_network_clear(&m->network);
}

json_t *hostmsg_sandbox_ready_encode(const struct hostmsg_sandbox_ready *m)
{
        json_t *o = json_pack("{s:s, s:i, s:I, s:I, s:s}", "sandbox_id", m->sandbox_id, "init_pid",
                              m->init_pid, "user_uid", (json_int_t)m->user_uid, "user_gid",
                              (json_int_t)m->user_gid, "root", m->root);

        if (o && m->has_root) {
                json_object_set_new(o, "root_uid", json_integer((json_int_t)m->root_uid));
                json_object_set_new(o, "root_gid", json_integer((json_int_t)m->root_gid));
        }
        if (o && m->cgroup[0])
                json_object_set_new(o, "cgroup", json_string(m->cgroup));
        if (o && m->network.enabled)
                json_object_set_new(o, "network", hostmsg_network_encode(&m->network));
        if (o && m->volumes && m->volumes[0])
                json_object_set_new(o, "volumes", strv_encode(m->volumes));
        return o;
}

/* A cgroup's name as a sandbox's may be: a plain name, never a path. */
static bool cgroup_name_valid(const char *s)
{
        if (!s[0])
                return false;
        for (; *s; s++) {
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                      (*s >= '0' && *s <= '9') || *s == '-'))
                        return false;
        }
        return true;
}

int hostmsg_sandbox_ready_decode(json_t *body, struct hostmsg_sandbox_ready *m)
{
        long long pid = 0, uid = 0, gid = 0, root_uid = 0, root_gid = 0;
        bool has_root = json_object_get(body, "root_uid") != NULL;
        int rc = get_id(body, "sandbox_id", m->sandbox_id);

        if (rc == 0)
                rc = get_int(body, "init_pid", 0, INT_MAX, &pid);
        if (rc == 0)
                rc = get_int(body, "user_uid", 0, UINT32_MAX - 1, &uid);
        if (rc == 0)
                rc = get_int(body, "user_gid", 0, UINT32_MAX - 1, &gid);
        if (rc == 0)
                rc = get_str(body, "root", m->root, sizeof(m->root));
        if (rc == 0 && m->root[0] != '/')
                rc = -EBADMSG;
        /* Host root is never a sandbox's root. */
        if (rc == 0 && has_root)
                rc = get_int(body, "root_uid", 1, UINT32_MAX - 1, &root_uid);
        if (rc == 0 && has_root)
                rc = get_int(body, "root_gid", 1, UINT32_MAX - 1, &root_gid);
        m->cgroup[0] = '\0';
        if (rc == 0 && json_object_get(body, "cgroup")) {
                rc = get_str(body, "cgroup", m->cgroup, sizeof(m->cgroup));
                if (rc == 0 && !cgroup_name_valid(m->cgroup))
                        rc = -EBADMSG;
        }
        if (rc == 0) {
                m->init_pid = (int)pid;
                m->user_uid = (unsigned)uid;
                m->user_gid = (unsigned)gid;
                m->has_root = has_root;
                m->root_uid = (unsigned)root_uid;
                m->root_gid = (unsigned)root_gid;
        }
        m->network = (struct hostmsg_network){0};
        m->volumes = NULL;
        if (rc == 0 && json_object_get(body, "network"))
                rc = hostmsg_network_decode(json_object_get(body, "network"), &m->network);
        if (rc == 0)
                rc = volumes_decode(body, &m->volumes);
        if (rc < 0)
                hostmsg_sandbox_ready_clear(m);
        return rc;
}

void hostmsg_sandbox_ready_clear(struct hostmsg_sandbox_ready *m)
{
        hostmsg_network_clear(&m->network);
        strv_clear(&m->volumes);
}

json_t *hostmsg_start_encode(const struct hostmsg_start *m)
{
        json_t *o = json_pack("{s:s, s:s, s:b, s:s, s:s, s:s, s:o, s:o}", "id", m->id, "sandbox_id",
                              m->sandbox_id, "kernel", m->kernel, "kernelspec_dir",
                              m->kernelspec_dir, "key", m->key, "cwd", m->cwd, "argv",
                              strv_encode(m->argv), "env", strv_encode(m->env));

        if (o && m->tcp_bridge)
                json_object_set_new(o, "tcp_bridge", json_true());
        if (o && m->pty)
                json_object_set_new(
                    o, "pty", json_pack("{s:i, s:i}", "rows", (int)m->rows, "cols", (int)m->cols));
        if (o && m->as_root)
                json_object_set_new(o, "as_root", json_true());
        if (o && m->zygote[0])
                json_object_set_new(o, "zygote", json_string(m->zygote));
        return o;
}

int hostmsg_start_decode(json_t *body, struct hostmsg_start *m)
{
        json_t *kernel = json_object_get(body, "kernel");
        int rc;

        memset(m, 0, sizeof(*m));
        rc = get_id(body, "id", m->id);
        if (rc == 0)
                rc = get_id(body, "sandbox_id", m->sandbox_id);
        if (rc == 0)
                rc = get_str(body, "kernelspec_dir", m->kernelspec_dir, sizeof(m->kernelspec_dir));
        if (rc == 0)
                rc = get_str(body, "key", m->key, sizeof(m->key));
        if (rc == 0)
                rc = get_str(body, "cwd", m->cwd, sizeof(m->cwd));
        if (rc == 0 && m->cwd[0] && m->cwd[0] != '/')
                rc = -EBADMSG;
        if (rc == 0)
                rc = strv_decode(json_object_get(body, "argv"), HOSTMSG_MAX_ARGS, 0, &m->argv);
        if (rc == 0 && !m->argv[0])
                rc = -EBADMSG;
        if (rc == 0)
                rc = strv_decode(json_object_get(body, "env"), HOSTMSG_MAX_ENV, 1, &m->env);
        if (rc == 0 && !json_is_boolean(kernel))
                rc = -EBADMSG;
        if (rc == 0 && json_object_get(body, "tcp_bridge") &&
            !json_is_boolean(json_object_get(body, "tcp_bridge")))
                rc = -EBADMSG;
        if (rc == 0 && json_object_get(body, "pty")) {
                json_t *pty = json_object_get(body, "pty");
                long long rows = 0, cols = 0;

                /* A terminal is a command's: a kernel talks over its sockets. */
                rc = json_is_object(pty) && !json_is_true(kernel) ? 0 : -EBADMSG;
                if (rc == 0)
                        rc = get_int(pty, "rows", 0, UINT16_MAX, &rows);
                if (rc == 0)
                        rc = get_int(pty, "cols", 0, UINT16_MAX, &cols);
                m->pty = rc == 0;
                m->rows = (uint16_t)rows;
                m->cols = (uint16_t)cols;
        }
        if (rc == 0 && json_object_get(body, "as_root") &&
            !json_is_boolean(json_object_get(body, "as_root")))
                rc = -EBADMSG;
        if (rc == 0 && json_object_get(body, "zygote"))
                rc = get_str(body, "zygote", m->zygote, sizeof(m->zygote));
        /* The bounds of the whole: what the gateway checked before sending. */
        if (rc == 0 && hostmsg_start_check(m, NULL, 0) < 0)
                rc = -EBADMSG;
        if (rc < 0) {
                hostmsg_start_clear(m);
                return rc;
        }
        m->kernel = json_is_true(kernel);
        m->tcp_bridge = m->kernel && json_is_true(json_object_get(body, "tcp_bridge"));
        /* Kernels always run as the sandbox's user. */
        m->as_root = !m->kernel && json_is_true(json_object_get(body, "as_root"));
        return 0;
}

void hostmsg_start_clear(struct hostmsg_start *m)
{
        strv_clear(&m->argv);
        strv_clear(&m->env);
}

/* Checks one list of strings (argv or env) against the bounds, adding its
 * bytes to *total; 0, or the error with why filled in. */
static int check_strv(char *const *v, const char *what, size_t max, bool need_equals, size_t *total,
                      char *why, size_t size)
{
        size_t n = 0;

        for (; v && v[n]; n++) {
                size_t len = strlen(v[n]);

                if (n == max) {
                        snprintf(why, size, "%s has more than %zu entries (at most %zu)", what, max,
                                 max);
                        return -E2BIG;
                }
                if (len > HOSTMSG_MAX_STRING) {
                        snprintf(why, size,
                                 "%s entry %zu is %zu bytes, more than the %d bytes Linux allows "
                                 "one argument or environment variable (MAX_ARG_STRLEN)",
                                 what, n, len, HOSTMSG_MAX_STRING);
                        return -E2BIG;
                }
                if (need_equals && !strchr(v[n], '=')) {
                        snprintf(why, size, "%s entry %zu is not NAME=value", what, n);
                        return -EINVAL;
                }
                *total += len + 1;
        }
        return 0;
}

int hostmsg_start_check(const struct hostmsg_start *m, char *why, size_t size)
{
        char ignored[8];
        size_t total = 0;
        int rc;

        if (!why) {
                why = ignored;
                size = sizeof(ignored);
        }
        if (!m->argv || !m->argv[0]) {
                snprintf(why, size, "no program to run");
                return -EINVAL;
        }
        if (m->cwd[0] && m->cwd[0] != '/') {
                snprintf(why, size, "the working directory must be an absolute path");
                return -EINVAL;
        }
        rc = check_strv(m->argv, "the command line", HOSTMSG_MAX_ARGS, false, &total, why, size);
        if (rc == 0)
                rc =
                    check_strv(m->env, "the environment", HOSTMSG_MAX_ENV, true, &total, why, size);
        if (rc == 0 && total > HOSTMSG_MAX_EXEC_BYTES) {
                snprintf(why, size,
                         "the command line and environment are %zu bytes together, more than "
                         "the %d allowed (half of what Linux allows at most)",
                         total, HOSTMSG_MAX_EXEC_BYTES);
                rc = -E2BIG;
        }
        return rc;
}

int hostmsg_request_id(json_t *body, const char *key, char id[JP_UUID_SIZE])
{
        return get_id(body, key, id);
}

json_t *hostmsg_started_encode(const struct hostmsg_started *m)
{
        return json_pack("{s:s, s:i, s:s}", "id", m->id, "pid", m->pid, "ipc_prefix",
                         m->ipc_prefix);
}

int hostmsg_started_decode(json_t *body, struct hostmsg_started *m)
{
        long long pid = 0;
        int rc = get_id(body, "id", m->id);

        if (rc == 0)
                rc = get_int(body, "pid", 1, INT_MAX, &pid);
        if (rc == 0)
                rc = get_str(body, "ipc_prefix", m->ipc_prefix, sizeof(m->ipc_prefix));
        if (rc == 0)
                m->pid = (int)pid;
        return rc;
}

json_t *hostmsg_failed_encode(const struct hostmsg_failed *m)
{
        json_t *o = json_pack("{s:s, s:s, s:i, s:s}", "id", m->id, "step", m->step, "error",
                              m->error, "message", m->message);

        if (o && m->bytes)
                json_object_set_new(o, "bytes", json_integer((json_int_t)m->bytes));
        return o;
}

int hostmsg_failed_decode(json_t *body, struct hostmsg_failed *m)
{
        long long error = 0;
        int rc = get_id(body, "id", m->id);

        if (rc == 0)
                rc = get_str(body, "step", m->step, sizeof(m->step));
        if (rc == 0)
                rc = get_int(body, "error", 0, 4095, &error);
        if (rc == 0)
                rc = get_str(body, "message", m->message, sizeof(m->message));
        if (rc == 0)
                m->error = (int)error;
        m->bytes = 0;
        if (rc == 0 && json_object_get(body, "bytes")) {
                long long bytes = 0;

                rc = get_int(body, "bytes", 1, INT64_MAX, &bytes);
                m->bytes = rc == 0 ? (uint64_t)bytes : 0;
        }
        return rc;
}

json_t *hostmsg_signal_encode(const struct hostmsg_signal *m)
{
        /* STOP and SANDBOX_DESTROY carry no signal, and the decoder refuses
         * "signal": 0. */
        if (m->signal == 0)
                return json_pack("{s:s}", "id", m->id);
        return json_pack("{s:s, s:i}", "id", m->id, "signal", m->signal);
}

int hostmsg_signal_decode(json_t *body, struct hostmsg_signal *m)
{
        long long sig = 0;
        int rc = get_id(body, "id", m->id);

        if (rc == 0 && json_object_get(body, "signal"))
                rc = get_int(body, "signal", 1, 64, &sig);
        m->signal = (int)sig;
        return rc;
}

json_t *hostmsg_relimit_encode(const struct hostmsg_relimit *m)
{
        return json_pack("{s:s, s:o}", "id", m->id, "limits", limits_encode(&m->limits));
}

int hostmsg_relimit_decode(json_t *body, struct hostmsg_relimit *m)
{
        int rc = get_id(body, "id", m->id);

        return rc == 0 ? get_limits(json_object_get(body, "limits"), &m->limits) : rc;
}

json_t *hostmsg_connect_encode(const struct hostmsg_connect *m)
{
        return json_pack("{s:s, s:s, s:i}", "id", m->id, "sandbox_id", m->sandbox_id, "port",
                         m->port);
}

int hostmsg_connect_decode(json_t *body, struct hostmsg_connect *m)
{
        long long port = 0;
        int rc = get_id(body, "id", m->id);

        if (rc == 0)
                rc = get_id(body, "sandbox_id", m->sandbox_id);
        if (rc == 0)
                rc = get_int(body, "port", 1, 65535, &port);
        m->port = (int)port;
        return rc;
}

json_t *hostmsg_connected_encode(const struct hostmsg_connected *m)
{
        return json_pack("{s:s, s:i}", "id", m->id, "error", m->error);
}

int hostmsg_connected_decode(json_t *body, struct hostmsg_connected *m)
{
        long long error = 0;
        int rc = get_id(body, "id", m->id);

        if (rc == 0)
                rc = get_int(body, "error", 0, 4095, &error);
        m->error = (int)error;
        return rc;
}

json_t *hostmsg_exit_encode(const struct hostmsg_exit *m)
{
        return json_pack("{s:s, s:i, s:i, s:i, s:s}", "id", m->id, "pid", m->pid, "exit_code",
                         m->exit_code, "signal", m->signal, "reason", m->reason);
}

int hostmsg_exit_decode(json_t *body, struct hostmsg_exit *m)
{
        long long pid = 0, code = 0, sig = 0;
        int rc = get_id(body, "id", m->id);

        if (rc == 0)
                rc = get_int(body, "pid", 0, INT_MAX, &pid);
        if (rc == 0)
                rc = get_int(body, "exit_code", -1, 255, &code);
        if (rc == 0)
                rc = get_int(body, "signal", 0, 64, &sig);
        if (rc == 0)
                rc = get_str(body, "reason", m->reason, sizeof(m->reason));
        if (rc == 0) {
                m->pid = (int)pid;
                m->exit_code = (int)code;
                m->signal = (int)sig;
        }
        return rc;
}

json_t *hostmsg_layer_encode(const struct hostmsg_layer *m)
{
        return json_pack("{s:s, s:i}", "id", m->id, "error", m->error);
}

int hostmsg_layer_decode(json_t *body, struct hostmsg_layer *m)
{
        long long error = 0;
        int rc;

        memset(m, 0, sizeof(*m));
        rc = get_id(body, "id", m->id);
        if (rc == 0)
                rc = get_int(body, "error", 0, 4095, &error);
        m->error = (int)error;
        return rc;
}

json_t *hostmsg_volume_encode(const struct hostmsg_volume *m)
{
        return json_pack("{s:s, s:s, s:I, s:I, s:b}", "id", m->id, "volume_id", m->volume_id,
                         "size_mb", (json_int_t)m->size_mb, "room_mb", (json_int_t)m->room_mb,
                         "copy", m->copy);
}

int hostmsg_volume_decode(json_t *body, struct hostmsg_volume *m)
{
        long long mb = 0;
        int rc;

        memset(m, 0, sizeof(*m));
        rc = get_id(body, "id", m->id);
        if (rc == 0)
                rc = get_id(body, "volume_id", m->volume_id);
        if (rc == 0)
                rc = get_int(body, "size_mb", 0, 1ll << 30, &mb);
        m->size_mb = (uint64_t)mb;
        mb = 0;
        if (rc == 0 && json_object_get(body, "room_mb"))
                rc = get_int(body, "room_mb", 0, 1ll << 40, &mb);
        m->room_mb = (uint64_t)mb;
        m->copy = json_is_true(json_object_get(body, "copy"));
        return rc;
}

/* What every sandbox has of its own: a volume goes beside or below, not on
 * or in them (below /tmp and /home/user is fine). */
static const char *const volume_reserved[] = {
    "/proc", "/dev", "/sys",   "/run",   "/etc",    "/usr",          "/bin",
    "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt/glovebox", NULL};

bool hostmsg_volume_path_valid(const char *path)
{
        size_t len = strlen(path);

        if (path[0] != '/' || len < 2 || len > 255 || path[len - 1] == '/' ||
            strcmp(path, "/tmp") == 0 || strcmp(path, "/home") == 0 ||
            strcmp(path, "/home/user") == 0 || strpbrk(path, ",:\\\n"))
                return false;
        for (const char *c = path; *c;) {
                size_t n;

                c++; /* the '/' */
                n = strcspn(c, "/");
                if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                c += n;
        }
        for (size_t i = 0; volume_reserved[i]; i++) {
                size_t n = strlen(volume_reserved[i]);

                if (strncmp(path, volume_reserved[i], n) == 0 && (path[n] == '/' || !path[n]))
                        return false;
        }
        return true;
}

bool hostmsg_volume_mount_split(const char *mount, char *id, const char **path)
{
        const char *colon = strchr(mount, ':');

        if (!colon || (size_t)(colon - mount) != JP_UUID_SIZE - 1)
                return false;
        memcpy(id, mount, JP_UUID_SIZE - 1);
        id[JP_UUID_SIZE - 1] = '\0';
        *path = colon + 1;
        return jp_uuid_valid(id, strlen(id)) && hostmsg_volume_path_valid(*path);
}
