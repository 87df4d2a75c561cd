#include "autoconf.h"

#include "gateway/kernels/sandboxes.h"
#include "protocol/kernelspec.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/host.h"
#include "gateway/core/tenants.h"
#include "protocol/fleetid.h"
#include "protocol/log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct sandbox *sandboxes;

/* Tells every waiter, then drops the reference held meanwhile (waiters
 * may drop theirs), which may destroy or free sb. */
static void resolve(struct sandbox *sb)
{
        sandbox_ref(sb);
        while (sb->waiters) {
                struct sandbox_waiter *w = sb->waiters;

                sb->waiters = w->next;
                w->next = NULL;
                w->sandbox = NULL;
                w->ready(w, sb, sb->phase == SANDBOX_READY ? NULL : sb->error);
        }
        sandbox_unref(&sb);
}

static void sandbox_free(struct sandbox *sb);

static void on_ready(void *ctx, const struct hostmsg_sandbox_ready *m, int root_fd)
{
        struct sandbox *sb = ctx;

        sb->phase = SANDBOX_READY;
        sb->root_fd = root_fd;
        sb->init_pid = m->init_pid;
        sb->user_uid = m->user_uid;
        sb->user_gid = m->user_gid;
        sb->has_root = m->has_root;
        sb->root_uid = m->root_uid;
        sb->root_gid = m->root_gid;
        snprintf(sb->root, sizeof(sb->root), "%s", m->root);
        snprintf(sb->cgroup, sizeof(sb->cgroup), "%s", m->cgroup);
        /* A restore's egress is what its checkpoint kept. */
        if (m->network.enabled && !sb->network.enabled &&
            egress_network_copy(&m->network, &sb->network) < 0)
                log_warn("sandbox %s: its egress cannot be described (out of memory)",
                         fleetid_short(sb->id).s);
        /* And its volumes, mounted again. */
        if (m->volumes && !sb->volumes && jp_strv_dup(m->volumes, &sb->volumes) < 0)
                log_warn("sandbox %s: its volumes cannot be described (out of memory)",
                         fleetid_short(sb->id).s);
        resolve(sb);
}

static void sandbox_free(struct sandbox *sb)
{
        for (struct sandbox **link = &sandboxes; *link; link = &(*link)->next) {
                if (*link == sb) {
                        *link = sb->next;
                        break;
                }
        }
        if (sb->root_fd >= 0)
                close(sb->root_fd);
        egress_network_clear(&sb->network);
        jp_strv_free(sb->volumes);
        free(sb);
}

static void on_failed(void *ctx, const struct hostmsg_failed *m)
{
        struct sandbox *sb = ctx;

        sb->phase = SANDBOX_GONE;
        snprintf(sb->error, sizeof(sb->error), "%s", m->message);
        log_warn("sandbox %s failed: %s", fleetid_short(sb->id).s, sb->error);
        resolve(sb);
}

static void on_gone(void *ctx, const struct hostmsg_exit *m)
{
        struct sandbox *sb = ctx;

        sb->phase = SANDBOX_GONE;
        snprintf(sb->error, sizeof(sb->error), "the sandbox is gone");
        resolve(sb);
}

static const struct host_sandbox_ops sandbox_ops = {on_ready, on_failed, on_gone};

/* A new sandbox record of its own id, with limits and one reference, not
 * yet asked for nor listed. 0, -ENOMEM or -EIO. */
static int sandbox_alloc(const struct hostmsg_limits *limits, struct sandbox **out)
{
        struct sandbox *sb = calloc(1, sizeof(*sb));

        if (!sb)
                return -ENOMEM;
        if (jp_uuid4(sb->id) < 0) {
                free(sb);
                return -EIO;
        }
        sb->limits = *limits;
        sb->refs = 1;
        sb->root_fd = -1;
        *out = sb;
        return 0;
}

int sandbox_new(const struct hostmsg_limits *limits, char *const *ro_paths, bool confined,
                struct sandbox **out)
{
        return sandbox_new_in(limits, ro_paths, NULL, confined, out);
}

int sandbox_new_in(const struct hostmsg_limits *limits, char *const *ro_paths,
                   const char *template_root, bool confined, struct sandbox **out)
{
        return sandbox_new_networked(limits, ro_paths, template_root, confined, NULL, out);
}

int sandbox_new_networked(const struct hostmsg_limits *limits, char *const *ro_paths,
                          const char *template_root, bool confined,
                          const struct hostmsg_network *network, struct sandbox **out)
{
        return sandbox_new_layered(limits, ro_paths, template_root, confined, network, NULL, out);
}

int sandbox_new_layered(const struct hostmsg_limits *limits, char *const *ro_paths,
                        const char *template_root, bool confined,
                        const struct hostmsg_network *network, const struct sandbox_layers *layers,
                        struct sandbox **out)
{
        struct hostmsg_sandbox req = {
            .limits = *limits, .ro_paths = (char **)ro_paths, .sandbox = confined};
        struct sandbox *sb;
        int rc;

        *out = NULL;
        if (template_root && (size_t)snprintf(req.template_root, sizeof(req.template_root), "%s",
                                              template_root) >= sizeof(req.template_root))
                return -ENAMETOOLONG;
        if (layers) {
                req.layers = (char **)layers->ids;
                req.volumes = (char **)layers->volumes;
                if (layers->build)
                        snprintf(req.build_layer, sizeof(req.build_layer), "%s", layers->build);
                req.build_layer_mb = layers->build_mb;
        }
        rc = sandbox_alloc(limits, &sb);
        if (rc < 0)
                return rc;
        if (layers && jp_strv_dup(layers->volumes, &sb->volumes) < 0) {
                free(sb);
                return -ENOMEM;
        }
        if (network && network->enabled) {
                if (egress_network_copy(network, &sb->network) < 0) {
                        jp_strv_free(sb->volumes);
                        free(sb);
                        return -ENOMEM;
                }
                req.network = *network;
        }
        snprintf(req.sandbox_id, sizeof(req.sandbox_id), "%s", sb->id);
        snprintf(req.tenant, sizeof(req.tenant), "%s", tenants_share_name());
        rc = host_sandbox_create(&req, &sandbox_ops, sb);
        if (rc < 0) {
                egress_network_clear(&sb->network);
                jp_strv_free(sb->volumes);
                free(sb);
                return rc;
        }
        sb->next = sandboxes;
        sandboxes = sb;
        *out = sb;
        return 0;
}

int sandbox_new_restored(const struct hostmsg_limits *limits, const char *checkpoint, bool copy,
                         struct sandbox **out)
{
        struct sandbox *sb;
        int rc = sandbox_alloc(limits, &sb);

        *out = NULL;
        if (rc < 0)
                return rc;
        rc = host_sandbox_restore(sb->id, checkpoint, copy, &sandbox_ops, sb);
        if (rc < 0) {
                free(sb);
                return rc;
        }
        sb->next = sandboxes;
        sandboxes = sb;
        *out = sb;
        return 0;
}

void sandbox_when_ready(struct sandbox *sb, struct sandbox_waiter *w)
{
        if (sb->phase != SANDBOX_CREATING) {
                w->ready(w, sb, sb->phase == SANDBOX_READY ? NULL : sb->error);
                return;
        }
        w->sandbox = sb;
        w->next = sb->waiters;
        sb->waiters = w;
}

void sandbox_waiter_cancel(struct sandbox_waiter *w)
{
        if (!w->sandbox)
                return;
        for (struct sandbox_waiter **link = &w->sandbox->waiters; *link; link = &(*link)->next) {
                if (*link == w) {
                        *link = w->next;
                        break;
                }
        }
        w->sandbox = NULL;
        w->next = NULL;
}

struct sandbox *sandbox_ref(struct sandbox *sb)
{
        sb->refs++;
        return sb;
}

void sandbox_unref(struct sandbox **sbp)
{
        struct sandbox *sb = *sbp;

        *sbp = NULL;
        if (!sb || --sb->refs > 0)
                return;
        /* Gone: no report will come for it any more. */
        if (sb->phase == SANDBOX_GONE) {
                sandbox_free(sb);
                return;
        }
        /* Freed when the kernel-host reports it gone (a creating one is
         * destroyed too: the kernel-host handles requests in order). */
        if (sb->destroying)
                return;
        sb->destroying = true;
        if (host_sandbox_destroy(sb->id) < 0)
                log_warn("cannot ask for sandbox %s to be destroyed", fleetid_short(sb->id).s);
}

int sandbox_adopt(const struct sandbox *kept, int root_fd, struct sandbox **out)
{
        struct sandbox *sb = calloc(1, sizeof(*sb));
        int rc;

        *out = NULL;
        if (!sb)
                return -ENOMEM;
        *sb = *kept;
        sb->next = NULL;
        sb->network = (struct hostmsg_network){0};
        sb->phase = SANDBOX_READY;
        sb->refs = 1;
        sb->destroying = false;
        sb->kept = false;
        sb->waiters = NULL;
        sb->npublic_ports = 0;
        sb->all_ports_public = false;
        sb->request_host[0] = '\0';
        sb->root_fd = -1;
        /* The descriptor came across execve: ours again, not a child's. */
        if (root_fd >= 0 && fcntl(root_fd, F_SETFD, FD_CLOEXEC) < 0) {
                free(sb);
                return -EBADF;
        }
        rc = host_listen(sb->id, &sandbox_ops, NULL, sb);
        if (rc < 0) {
                free(sb);
                return rc;
        }
        sb->root_fd = root_fd;
        sb->next = sandboxes;
        sandboxes = sb;
        *out = sb;
        return 0;
}

int sandbox_keep(struct sandbox *sb)
{
        if (sb->phase != SANDBOX_READY || sb->destroying || sb->network.enabled)
                return -EINVAL;
        sb->kept = true;
        return 0;
}

json_t *sandboxes_unkept_ids(void)
{
        json_t *ids = json_array();

        for (struct sandbox *sb = sandboxes; ids && sb; sb = sb->next) {
                if (sb->kept || sb->destroying || sb->phase == SANDBOX_GONE)
                        continue;
                if (json_array_append_new(ids, json_string(sb->id)) < 0) {
                        json_decref(ids);
                        return NULL;
                }
        }
        return ids;
}

void sandboxes_keep_inheritable(void)
{
        for (struct sandbox *sb = sandboxes; sb; sb = sb->next) {
                if (sb->kept && sb->root_fd >= 0)
                        fcntl(sb->root_fd, F_SETFD, 0);
        }
}

void sandboxes_keep_reset(void)
{
        for (struct sandbox *sb = sandboxes; sb; sb = sb->next) {
                sb->kept = false;
                /* An exec that failed: the roots are ours alone again. */
                if (sb->root_fd >= 0)
                        fcntl(sb->root_fd, F_SETFD, FD_CLOEXEC);
        }
}

/* ---- what ports of it are reached how (ports/ reads these) ---------------- */

int sandbox_port_number(const char *s, size_t len)
{
        int port = 0;

        if (len == 0 || len > 5 || s[0] == '0')
                return -1;
        for (size_t i = 0; i < len; i++) {
                if (!isdigit((unsigned char)s[i]))
                        return -1;
                port = port * 10 + (s[i] - '0');
        }
        return port >= 1 && port <= 65535 ? port : -1;
}

int sandbox_parse_public_ports(const char *text, struct sandbox *box, char *err, size_t errlen)
{
        unsigned short ports[SANDBOX_MAX_PUBLIC_PORTS];
        size_t n = 0;
        const char *p = text;

        while (p && *p) {
                size_t len = strcspn(p, ",");
                int port;

                while (len && *p == ' ') {
                        p++;
                        len--;
                }
                while (len && p[len - 1] == ' ')
                        len--;
                port = sandbox_port_number(p, len);
                if (port < 0 || n == SANDBOX_MAX_PUBLIC_PORTS) {
                        if (err)
                                snprintf(err, errlen,
                                         "give at most %d ports from 1 to 65535, comma-separated",
                                         SANDBOX_MAX_PUBLIC_PORTS);
                        return -EINVAL;
                }
                ports[n++] = (unsigned short)port;
                p += strcspn(p, ",");
                if (*p == ',')
                        p++;
        }
        if (box) {
                memcpy(box->public_ports, ports, n * sizeof(ports[0]));
                box->npublic_ports = n;
        }
        return 0;
}

int sandbox_parse_request_host(const char *text, struct sandbox *box, char *err, size_t errlen)
{
        size_t len = strlen(text);

        /* What a Host header may hold of a name, an address (IPv6 in
         * brackets) and a port: nothing that could end the header or start
         * another. The placeholder's own characters only as the
         * placeholder. */
        for (const char *p = text; *p;) {
                if (strncmp(p, SANDBOX_PORT_PLACEHOLDER, strlen(SANDBOX_PORT_PLACEHOLDER)) == 0) {
                        p += strlen(SANDBOX_PORT_PLACEHOLDER);
                        continue;
                }
                if (!isalnum((unsigned char)*p) && !strchr(".-_:[]", *p)) {
                        len = 0;
                        break;
                }
                p++;
        }
        /* Room for the placeholder's expansion to five digits. */
        if (len == 0 || len + 8 * 5 >= SANDBOX_REQUEST_HOST_MAX) {
                if (err)
                        snprintf(err, errlen,
                                 "a host name or address with an optional :port, at most %d "
                                 "characters of letters, digits and .-_:[], where %s stands "
                                 "for the port",
                                 SANDBOX_REQUEST_HOST_MAX - 41, SANDBOX_PORT_PLACEHOLDER);
                return -EINVAL;
        }
        if (box)
                snprintf(box->request_host, sizeof(box->request_host), "%s", text);
        return 0;
}

static const struct sandbox_names *names;

void sandboxes_set_names(const struct sandbox_names *given)
{
        names = given;
}

bool sandbox_resolve_name(const char *name, struct sandbox **box, const char **owner)
{
        return names && names->resolve(name, box, owner);
}

bool sandbox_name_token_ok(const char *name, const char *token)
{
        return names && names->token_ok(name, token);
}

bool sandbox_name_asleep(const char *name, struct sandbox *shape, const char **owner)
{
        return names && names->asleep && names->asleep(name, shape, owner);
}

int sandbox_name_wake(const char *name, struct sandbox_wake *w)
{
        int rc;

        if (!names || !names->wake)
                return -ENOENT;
        snprintf(w->name, sizeof(w->name), "%s", name);
        w->next = NULL;
        w->waiting = true;
        rc = names->wake(name, w);
        if (rc < 0)
                w->waiting = false;
        return rc;
}

void sandbox_name_wake_cancel(struct sandbox_wake *w)
{
        if (w->waiting && names && names->wake_cancel)
                names->wake_cancel(w);
        w->waiting = false;
}

void sandbox_wake_finish(struct sandbox_wake *w, const char *error)
{
        w->waiting = false;
        w->next = NULL;
        w->done(w, error);
}
