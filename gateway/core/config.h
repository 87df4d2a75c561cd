/* The gateway's configuration: one table describes every option (name,
 * type, bounds, default, help); the command line, a JSON file given with
 * --config and GLOVEBOX_TOKEN fill it; it is validated once at start. */
#ifndef GLOVEBOX_CONFIG_H
#define GLOVEBOX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A token's length, in characters. */
#define CONFIG_TOKEN_MIN 8
#define CONFIG_TOKEN_MAX 256

/* Where the token came from: what the start-up line may show and what to
 * warn about depend on it. */
enum config_token_source {
        CONFIG_TOKEN_NONE,      /* --no-auth */
        CONFIG_TOKEN_GENERATED, /* made up at start: printed, as nobody else knows it */
        CONFIG_TOKEN_ENV,       /* GLOVEBOX_TOKEN */
        CONFIG_TOKEN_FILE,      /* --token-file */
        CONFIG_TOKEN_CONFIG,    /* "token" in the --config file */
        CONFIG_TOKEN_ARGV,      /* --token: visible in ps */
};

struct config {
        /* network and auth */
        char *listen;          /* HOST:PORT */
        char *token;
        char *token_file;      /* the token's file, read by config_load */
        bool no_auth;
        char *keys_file;       /* API keys of tenants (gateway/core/keys.h); "": none */
        char *base_url;        /* normalised: starts and ends with '/' */
        char *allow_origin;    /* '*' or a comma-separated list */
        char *allow_host;      /* names accepted in Host: '*' or a comma-separated list */
        char *ports_domain;    /* "{port}-{id}." names under it reach sandboxes' ports */
        int64_t port_buffer_bytes; /* per relayed connection and direction */
        double port_idle_timeout;  /* an upgraded relay with no byte either way; 0: none */
        int64_t port_max_connecting_per_tenant; /* connects in flight for one tenant's ports */
        int64_t max_connections;
        int64_t max_connections_per_address;
        double unauthenticated_timeout; /* seconds from accept to a request let through */
        /* kernels */
        char *kernelspec_path;
        char *default_kernel;
        char *runtime_dir;
        char *state_dir;       /* durable state; "": none (as root: /var/lib/glovebox) */
        char *home_storage;    /* "memory" or "disk" */
        double keep_grace;     /* seconds kept kernels wait for re-adoption */
        char *sandbox;         /* "full" or "none" */
        char **templates;      /* "NAME=DIR" or "NAME=host:DIR[:DIR...]" entries */
        /* template builds (gateway/e2b/builds.h) */
        char **template_image;          /* "IMAGE=TEMPLATE": a build's base image */
        int64_t template_build_disk_mb; /* a build's new layer */
        int64_t volume_size_mb;         /* one volume's image */
        int64_t pause_quota_mb;         /* per tenant, of paused archives */
        int64_t pause_compress_after;   /* s before a checkpoint is compressed; -1 never */
        int64_t sandbox_stock;          /* sandboxes the kernel-host makes ahead */
        int64_t volume_quota_mb;        /* per tenant, of volumes' sizes */
        int64_t template_quota_mb;      /* a tenant's built templates on disk */
        int64_t template_upload_max_mb; /* a tenant's uploaded files to copy */
        double template_build_timeout;
        int64_t template_max_builds;    /* per tenant at once */
        int64_t template_max_templates; /* per tenant */
        int64_t max_kernels;
        int64_t max_terminals;
        double kernel_start_timeout;
        double shutdown_grace;
        bool no_autorestart;
        int64_t max_restarts;
        int64_t max_host_restarts;
        /* limits per kernel: default and server maximum */
        int64_t memory_mb, max_memory_mb;
        double cpus, max_cpus;
        int64_t pids, max_pids;
        int64_t disk_mb, max_disk_mb;
        bool allow_unenforced_limits; /* accept limits the kernel-host cannot enforce */
        /* MCP (gateway/mcp/mcp.c) */
        int64_t mcp_max_sessions;
        int64_t mcp_max_sessions_per_key; /* 0: a quarter of mcp_max_sessions */
        double mcp_unused_session_timeout;
        int64_t mcp_max_output_bytes;
        /* idle culling */
        double cull_idle_timeout;
        double cull_interval;
        bool cull_connected;
        bool cull_busy;
        /* TLS */
        char *certfile;
        char *keyfile;
        /* message handling */
        double iopub_msg_rate_limit;
        double iopub_data_rate_limit;
        double rate_limit_window;
        char *allowed_message_types; /* comma-separated; empty: all */
        int64_t max_message_bytes;
        int64_t max_body_bytes;
        int64_t replay_bytes;
        int64_t replay_messages;
        int64_t stream_buffer_bytes;
        int64_t iopub_queue_bytes;   /* a kernel's iopub taken in and not yet relayed */ /* an HTTP execution's output waiting for its client */
        double session_linger;
        int64_t max_lingering_sessions; /* per kernel; past it the oldest is evicted */
        bool keep_running_on_disconnect; /* an HTTP execution's client left: let the cell run */
        double e2b_max_timeout;          /* the longest lifetime an E2B sandbox may ask for */
        bool e2b_refuse_internet;        /* allow_internet_access: true is a 400, not "no network" */
        bool e2b_public_traffic;         /* ports public unless the create says otherwise */
        /* E2B directory watchers (gateway/kernels/watch.h) */
        int64_t watch_max_watchers;
        int64_t watch_max_watchers_per_sandbox;
        int64_t watch_max_watchers_per_tenant;
        int64_t watch_max_dirs;
        int64_t watch_max_dirs_per_sandbox;
        int64_t watch_max_dirs_per_tenant;
        int64_t watch_queue_events;
        /* egress (gateway/kernels/egress.h) */
        char **egress_allow; /* comma-separated rules per entry; none: no egress at all */
        char **egress_deny;
        char *egress_dns; /* upstream resolver for domain rules; "": /etc/resolv.conf's */
        int64_t egress_rate_kib;
        int64_t egress_max_connections;
        /* the warm pool */
        char **pool;           /* "NAME=N" entries */
        char **pool_preimport; /* "NAME=CODE" entries */
        int64_t pool_min_available_mb;
        /* several hosts (gateway/core/fleet.h) */
        char *host_id;      /* "": a single host */
        char *agent_listen; /* ADDRESS:PORT of HAProxy's agent-check; "": none */
        char **peers;       /* http://ADDRESS:PORT of the other gateways */
        double peer_timeout;
        /* zygotes: "NAME:MODULE,..." entries, one fork server per kernelspec */
        char *criu;            /* CRIU's program, for memory checkpoints */
        char **zygote;
        /* misc */
        char *static_dir;
        char *log_level;
        char *log_format; /* "text" or "json" */
        int64_t log_rate_limit; /* lines a second of one repeated warning, per kernel */
        char *access_log;       /* "all", "errors" or "off" (gateway/core/access_log.h) */
        bool check_config;
        bool hash_key;         /* print the SHA-256 of the key on stdin and exit */

        /* derived by config_load */
        char host[256];
        int port;
        enum config_token_source token_source;
};

/* Fills cfg from defaults, GLOVEBOX_TOKEN, --config FILE and argv, then
 * validates. Returns 0; 1 when --help was printed (exit 0); or -EINVAL
 * after printing the reason to stderr. */
int config_load(struct config *cfg, int argc, char **argv);
/* The configuration config_load filled (the gateway has one). */
const struct config *config_get(void);

void config_free(struct config *cfg);
/* One option of the table as --help and docs/flags.md show it. */
struct config_option_doc {
        const char *name; /* without its "--" */
        const char *arg;  /* what its value is ("N", "FILE"); "" for a flag */
        const char *dflt; /* its default; "" for none (a flag: off) */
        bool dflt_is_value; /* dflt is a value as given, not words */
        const char *help; /* plain text; "docs/PAGE.md#anchor" names a page */
};

/* Fills doc with the i-th option of the table (pointers into it, static);
 * -ENOENT past the last. */
int config_option_doc(size_t i, struct config_option_doc *doc);

/* gateway/core/config_help.c: the option table as --help (plain text, for a
 * terminal) and as --help-markdown (docs/flags.md, which
 * scripts/gen-flags-doc writes from it) print it, on stdout. */
void config_print_help(const char *program);
void config_print_markdown(void);

/* Whether kernelspec name has a zygote (--zygote). */
bool config_has_zygote(const struct config *cfg, const char *name);

#endif
