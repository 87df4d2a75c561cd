#include "autoconf.h"

#include "gateway/core/config.h"
#include "gateway/core/config_private.h"
#include "gateway/core/fleet.h"
#include "gateway/core/hostcheck.h"
#include "protocol/ids.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* OPT_LIST: repeatable, each value appended (a NULL-terminated char **). */
enum option_type { OPT_STRING, OPT_INT, OPT_DOUBLE, OPT_FLAG, OPT_LIST };

/* One option: how it is parsed, and how --help and docs/flags.md show it
 * (config_option_doc); the two are printed from this table alone, so that
 * they cannot disagree with what is parsed. */
struct option_def {
        const char *name;
        enum option_type type;
        size_t offset;
        double min, max;   /* for numbers */
        const char *dflt;  /* as text, parsed like the command line */
        const char *arg;   /* what the value is: "N", "FILE", "memory|disk" */
        const char *shown; /* a default worked out at start, in words; NULL: dflt */
        const char *help;  /* plain text; "docs/PAGE.md#anchor" becomes a link */
};

#define OPT(n, t, field, a, lo, hi, d, h)                                                          \
        {n, t, offsetof(struct config, field), lo, hi, d, a, NULL, h}
/* An option whose default depends on the host or other options. */
#define OPT_SHOWN(n, t, field, a, d, shown, h)                                                     \
        {n, t, offsetof(struct config, field), 0, 0, d, a, shown, h}

static const struct option_def options[] = {
        OPT("listen", OPT_STRING, listen, "HOST:PORT", 0, 0, "127.0.0.1:8888",
            "address and port to serve on (an IPv6 address in brackets)"),
        OPT_SHOWN("token", OPT_STRING, token, "TOKEN", NULL,
                  "GLOVEBOX_TOKEN, else one generated and printed once",
                  "API token, 8 to 256 printable characters without spaces; every user of the "
                  "machine sees it in ps until glovebox has started: prefer --token-file or "
                  "GLOVEBOX_TOKEN (docs/operations.md#access-token-host-connections)"),
        OPT("token-file", OPT_STRING, token_file, "FILE", 0, 0, "",
            "read the API token from this file's first line (spaces around it ignored); warns "
            "if the file is readable by every user. Recommended: the token stays out of ps"),
        OPT("keys-file", OPT_STRING, keys_file, "FILE", 0, 0, "",
            "API keys of tenants, as JSON with each key's SHA-256 and quotas "
            "(docs/operations.md#tenants-api-keys-and-quotas); read again on SIGHUP; the token, "
            "if any, stays an admin key named admin"),
        OPT("no-auth", OPT_FLAG, no_auth, "", 0, 0, NULL,
            "serve without a token, every request the admin's; allowed on loopback addresses "
            "only, with a warning, for clients that cannot send one; excludes --keys-file"),
        OPT("base-url", OPT_STRING, base_url, "PATH", 0, 0, "/", "URL prefix of every route"),
        OPT("allow-origin", OPT_STRING, allow_origin, "LIST", 0, 0, "",
            "origins allowed for CORS and WebSocket upgrades (* or comma-separated)"),
        OPT("allow-host", OPT_STRING, allow_host, "LIST", 0, 0, "",
            "names clients may reach the gateway by (the Host header) besides localhost, "
            "loopback addresses, the --listen host and, listening beyond loopback, any IP "
            "address; comma-separated, a port ignored; * turns this defence against DNS "
            "rebinding off. Others get 403 (docs/operations.md#access-token-host-connections)"),
        OPT_SHOWN("ports-domain", OPT_STRING, ports_domain, "NAME[:PORT]", "",
                  "localhost:PORT listening on loopback, on every address or on an IPv6 one; "
                  "else the --listen address",
                  "names {port}-{id}.NAME reach a port of a sandbox "
                  "(docs/terminals-and-ports.md#ports-servers-in-a-sandbox); returned to E2B's "
                  "SDKs as domain, so that getHost(port) names it"),
        OPT("port-buffer-bytes", OPT_INT, port_buffer_bytes, "N", 4096, 16777216, "65536",
            "bytes held per relayed port connection and direction (4 KiB to 16 MiB); a side "
            "that reads no faster stops the other"),
        OPT("port-idle-timeout", OPT_DOUBLE, port_idle_timeout, "S", 0, 1e7, "900",
            "seconds an upgraded port relay (a WebSocket, or any Upgrade) may pass no byte "
            "either way before the gateway closes it; 0: never"),
        OPT("port-max-connecting-per-tenant", OPT_INT, port_max_connecting_per_tenant, "N", 1,
            64, "16",
            "connections into sandboxes being made at once for one tenant's ports, of the "
            "kernel-host's 64 (8 per sandbox); past it a request is answered 503 at once, so "
            "that one tenant's ports that never accept cannot starve another tenant's"),
        OPT("max-connections", OPT_INT, max_connections, "N", 1, 1000000, "4096",
            "client connections at once; past it a new one is answered 503 and closed"),
        OPT("max-connections-per-address", OPT_INT, max_connections_per_address, "N", 1,
            1000000, "512",
            "client connections at once from one address (IPv6: its /64); past it a new one is "
            "answered 429, past twice it closed unanswered"),
        OPT("unauthenticated-timeout", OPT_DOUBLE, unauthenticated_timeout, "S", 0.1, 3600, "10",
            "seconds a new connection has to make a request with credentials, TLS handshake "
            "and headers included (a request for a page file starts them again); then it is "
            "closed"),
        OPT("kernelspec-path", OPT_STRING, kernelspec_path, "DIRS", 0, 0, "",
            "extra kernelspec directories (':'-separated), searched first; all are looked at "
            "again when they change (docs/templates-and-languages.md#languages)"),
        OPT("default-kernel", OPT_STRING, default_kernel, "NAME", 0, 0, "python3",
            "kernelspec started when a request names none"),
        OPT("runtime-dir", OPT_STRING, runtime_dir, "DIR", 0, 0, "/tmp",
            "where each run's directory goes (glovebox-XXXXXX: sandbox mount points, a lock, "
            "unconfined kernels' sockets); at start, those of runs that ended without cleaning "
            "up are removed, with their cgroups"),
        OPT_SHOWN("state-dir", OPT_STRING, state_dir, "DIR", "",
                  "/var/lib/glovebox as root; none otherwise",
                  "durable state: paused sandboxes and kernels (docs/pause.md), disk homes, "
                  "built templates, the record of a restart that keeps kernels "
                  "(docs/restart.md); without one, pausing and SIGUSR2 are refused"),
        OPT("home-storage", OPT_STRING, home_storage, "memory|disk", 0, 0, "memory",
            "what backs each sandbox's /home/user: memory, a tmpfs counted against the "
            "sandbox's memory; disk, an ext4 image of the sandbox's disk limit under "
            "--state-dir, removed with the sandbox (needs root, loop devices and mkfs.ext4; "
            "docs/isolation-and-network.md#disk-backed-homes)"),
        OPT("keep-grace", OPT_DOUBLE, keep_grace, "S", 1, 3600, "30",
            "seconds each kept kernel has, after SIGUSR2 (a restart that keeps kernels), to "
            "answer the new gateway's kernel_info; one that does not is killed (reported dead, "
            "never restarted under its old id)"),
        OPT("sandbox", OPT_STRING, sandbox, "full|none", 0, 0, "full",
            "none runs kernels unconfined: for developers only, logged loudly"),
        OPT("sandbox-stock", OPT_INT, sandbox_stock, "N", 0, 64, "4",
            "as root, sandboxes the kernel-host keeps made ahead (namespaces, mounts, cgroup, "
            "init, and once kernels come from a zygote the kernel's process forked; idle, at "
            "the least CPU weight) for requests of the host's form without a template, volume "
            "or network: such a request claims one and has only its limits applied "
            "(docs/performance.md#sandboxes-made-ahead); 0: none"),
        OPT("template", OPT_LIST, templates, "NAME=DIR", 0, 0, NULL,
            "an environment sandboxes can be made of: NAME=DIR, a root filesystem tree "
            "(debootstrap, an OCI image's layers) under a writable layer of each sandbox's "
            "own; NAME=host:DIR[:DIR...], the host's /usr plus those directories, read-only "
            "(repeatable; docs/templates-and-languages.md#templates)"),
        OPT_SHOWN("template-image", OPT_LIST, template_image, "IMAGE=TEMPLATE", NULL,
                  "none (e2bdev/base is base)",
                  "what a template build from image IMAGE (E2B's from_image(\"ubuntu:22.04\")) "
                  "starts from: a --template NAME, or base for the host's /usr; no registry is "
                  "ever asked (repeatable; "
                  "docs/templates-and-languages.md#building-templates-e2bs-templatebuild)"),
        OPT("template-build-disk-mb", OPT_INT, template_build_disk_mb, "N", 16, 1 << 20, "4096",
            "room of one template build for what its steps write (its layer, an image under "
            "--state-dir)"),
        OPT("template-quota-mb", OPT_INT, template_quota_mb, "N", 0, 1LL << 30, "20480",
            "disk one key's built templates take at most (their layers, as written; a build "
            "running counts its whole room); past it a build is refused (429)"),
        OPT("pause-quota-mb", OPT_INT, pause_quota_mb, "N", 0, 1LL << 30, "20480",
            "what one key's paused sandboxes and kernels may keep under --state-dir at most "
            "(their files' archives); a pause past it is refused"),
        OPT("pause-compress-after", OPT_INT, pause_compress_after, "S", -1, 1 << 24, "60",
            "seconds after a checkpoint is made (a pause with the memory, a snapshot, a fork's) "
            "before the kernel-host compresses its memory pages with zstd, in the background at "
            "the lowest priority; a resume of a compressed one decompresses them first (about "
            "0.2 s per 100 MiB of pages on 2 cores); 0: at once, -1: never "
            "(docs/pause.md#compressed-checkpoints)"),
        OPT("volume-size-mb", OPT_INT, volume_size_mb, "N", 16, 1 << 24, "1024",
            "size of one volume (E2B's Volume, a kernel's \"volumes\"): an ext4 image under "
            "--state-dir, sparse, so the disk holds what is written, at most this"),
        OPT("volume-quota-mb", OPT_INT, volume_quota_mb, "N", 0, 1LL << 30, "10240",
            "what one key's volumes together may hold at most (their sizes); past it a new one "
            "is refused (429)"),
        OPT("template-upload-max-mb", OPT_INT, template_upload_max_mb, "N", 1, 1 << 20, "1024",
            "disk one key's uploaded files to copy (Template.copy) take at most"),
        OPT("template-build-timeout", OPT_DOUBLE, template_build_timeout, "S", 10, 1e6, "1800",
            "seconds one template build may take, its start and ready commands included"),
        OPT("template-max-builds", OPT_INT, template_max_builds, "N", 1, 1024, "2",
            "template builds one key runs at once; past it a build is refused (429)"),
        OPT("template-max-templates", OPT_INT, template_max_templates, "N", 1, 100000, "64",
            "built templates one key keeps; past it a new one is refused (429)"),
        OPT("max-kernels", OPT_INT, max_kernels, "N", 1, 100000, "1000",
            "kernels at once, starting and pooled ones included; past it a start gets 403"),
        OPT("max-terminals", OPT_INT, max_terminals, "N", 0, 10000, "100",
            "terminals (/api/terminals) at once, starting ones included, past it 403; 0: none"),
        OPT("kernel-start-timeout", OPT_DOUBLE, kernel_start_timeout, "S", 1, 3600, "60",
            "seconds a kernel may take to answer kernel_info before its start fails"),
        OPT("shutdown-grace", OPT_DOUBLE, shutdown_grace, "S", 0, 60, "2",
            "seconds between shutdown_request and SIGKILL"),
        OPT("no-autorestart", OPT_FLAG, no_autorestart, "", 0, 0, NULL,
            "do not restart kernels that die"),
        OPT("max-restarts", OPT_INT, max_restarts, "N", 0, 100, "5",
            "automatic restarts of a kernel that died before it is left dead"),
        OPT("max-host-restarts", OPT_INT, max_host_restarts, "N", 0, 1000, "5",
            "new kernel-hosts started after one died (its kernels restart on the new one); "
            "past that glovebox exits with status 1, for a supervisor to restart it (0: at the "
            "first death)"),
        OPT("memory-mb", OPT_INT, memory_mb, "N", 16, 1 << 24, "1024",
            "default memory limit per kernel, MiB"),
        OPT("max-memory-mb", OPT_INT, max_memory_mb, "N", 16, 1 << 24, "8192",
            "largest memory limit a request may ask for, MiB"),
        OPT("cpus", OPT_DOUBLE, cpus, "N", 0.01, 1024, "1", "default CPU limit per kernel (cores)"),
        OPT("max-cpus", OPT_DOUBLE, max_cpus, "N", 0.01, 1024, "2",
            "largest CPU limit a request may ask for"),
        OPT("pids", OPT_INT, pids, "N", 8, 1 << 22, "256", "default process limit per kernel"),
        OPT("max-pids", OPT_INT, max_pids, "N", 8, 1 << 22, "1024",
            "largest process limit a request may ask for"),
        OPT("disk-mb", OPT_INT, disk_mb, "N", 1, 1 << 24, "1024",
            "default writable disk per sandbox, MiB: its root's writes, /tmp and /home/user "
            "together (docs/isolation-and-network.md#limits)"),
        OPT("max-disk-mb", OPT_INT, max_disk_mb, "N", 1, 1 << 24, "8192",
            "largest disk limit a request may ask for, MiB"),
        OPT("allow-unenforced-limits", OPT_FLAG, allow_unenforced_limits, "", 0, 0, NULL,
            "accept a request for a memory, cpus or pids limit that this host's cgroups cannot "
            "enforce (default: 400); the kernel model lists what is not enforced "
            "(docs/isolation-and-network.md#limits)"),
        OPT("cull-idle-timeout", OPT_DOUBLE, cull_idle_timeout, "S", 0, 1e9, "0",
            "shut down kernels idle this many seconds, and end MCP sessions without a request "
            "this long (0: never)"),
        OPT("cull-interval", OPT_DOUBLE, cull_interval, "S", 1, 86400, "300",
            "seconds between looks for idle kernels"),
        OPT("cull-connected", OPT_FLAG, cull_connected, "", 0, 0, NULL,
            "cull idle kernels even while clients are connected"),
        OPT("cull-busy", OPT_FLAG, cull_busy, "", 0, 0, NULL, "cull kernels even while busy"),
        OPT("certfile", OPT_STRING, certfile, "FILE", 0, 0, "",
            "TLS certificate (PEM), with --keyfile: serve https and wss"),
        OPT("keyfile", OPT_STRING, keyfile, "FILE", 0, 0, "", "TLS private key (PEM)"),
        OPT("iopub-msg-rate-limit", OPT_DOUBLE, iopub_msg_rate_limit, "N", 0, 1e9, "0",
            "iopub messages a second per kernel past which outputs are held back, with a "
            "notice (0: no limit)"),
        OPT("iopub-data-rate-limit", OPT_DOUBLE, iopub_data_rate_limit, "N", 0, 1e12, "0",
            "stream bytes a second per kernel past which outputs are held back, with a notice "
            "(0: no limit)"),
        OPT("rate-limit-window", OPT_DOUBLE, rate_limit_window, "S", 0.1, 60, "3",
            "seconds over which the iopub rates are averaged"),
        OPT_SHOWN("allowed-message-types", OPT_STRING, allowed_message_types, "LIST", "", "all",
                  "comma-separated msg_types clients may send (empty: all)"),
        OPT("max-message-bytes", OPT_INT, max_message_bytes, "N", 4096, 1LL << 32, "134217728",
            "largest message relayed in either direction"),
        OPT("max-body-bytes", OPT_INT, max_body_bytes, "N", 1024, 1LL << 32, "1048576",
            "largest REST request body"),
        OPT("replay-bytes", OPT_INT, replay_bytes, "N", 0, 1LL << 34, "67108864",
            "outputs kept per client session while it is away or not reading (plus one "
            "message); past it the oldest go and the client is told how many"),
        OPT("replay-messages", OPT_INT, replay_messages, "N", 0, 10000000, "100000",
            "the same bound, in messages"),
        OPT("stream-buffer-bytes", OPT_INT, stream_buffer_bytes, "N", 4096, 1LL << 34,
            "67108864",
            "output of an HTTP execution (/execute) waiting for a slow client, plus one line; "
            "past it output lines are dropped and the client gets a stderr line with the count"),
        OPT("iopub-queue-bytes", OPT_INT, iopub_queue_bytes, "N", 4096, 1LL << 34, "67108864",
            "a kernel's outputs received and not yet relayed, when it writes faster than the "
            "gateway relays (plus one message); past it the oldest are dropped and every client "
            "gets a stderr line with the count"),
        OPT("session-linger", OPT_DOUBLE, session_linger, "S", 0, 86400, "300",
            "seconds a disconnected client session waits for its reconnect"),
        OPT("max-lingering-sessions", OPT_INT, max_lingering_sessions, "N", 0, 4096, "16",
            "disconnected client sessions kept per kernel for their reconnect; past it the one "
            "disconnected longest is evicted (its client is told if it comes back); 0: a "
            "session ends with its connection (docs/jupyter.md#reconnecting-and-replay)"),
        OPT("keep-running-on-disconnect", OPT_FLAG, keep_running_on_disconnect, "", 0, 0, NULL,
            "let an HTTP cell run (/execute) go on when its client leaves (default: interrupt)"),
        OPT("mcp-max-sessions", OPT_INT, mcp_max_sessions, "N", 1, 1000000, "256",
            "MCP sessions at once; past it an initialize is answered 503 (each session's "
            "sandbox also counts toward --max-kernels once it has one)"),
        OPT("mcp-max-sessions-per-key", OPT_INT, mcp_max_sessions_per_key, "N", 0, 1000000, "0",
            "MCP sessions one key (not an admin's) holds at once; past it an initialize is "
            "answered 429 (0: a quarter of --mcp-max-sessions, at least 1)"),
        OPT("mcp-unused-session-timeout", OPT_DOUBLE, mcp_unused_session_timeout, "S", 1, 1e7,
            "600",
            "seconds after which an MCP session that never started its kernel ends, whatever "
            "--cull-idle-timeout says"),
        OPT("mcp-max-output-bytes", OPT_INT, mcp_max_output_bytes, "N", 1024, 1LL << 30,
            "1048576",
            "output one MCP tool call returns: a cell's text and images, a command's stdout and "
            "stderr each, the largest file read_file reads; past it the rest is cut and the "
            "result says so (docs/mcp.md)"),
        OPT("e2b-max-timeout", OPT_DOUBLE, e2b_max_timeout, "S", 1, 1e7, "86400",
            "longest lifetime, in seconds, an E2B sandbox may ask for (default lifetime 300)"),
        OPT("e2b-refuse-internet", OPT_FLAG, e2b_refuse_internet, "", 0, 0, NULL,
            "answer 400 to an E2B sandbox request for internet access (default: accept it and "
            "give the sandbox what the network policy allows, which is no network without "
            "--egress-allow)"),
        OPT("e2b-public-traffic", OPT_FLAG, e2b_public_traffic, "", 0, 0, NULL,
            "E2B sandboxes created without network.allowPublicTraffic get E2B's default: every "
            "port reached without a token (default: a port needs the API key or the sandbox's "
            "traffic access token unless the create says allowPublicTraffic true)"),
        OPT("watch-max-watchers", OPT_INT, watch_max_watchers, "N", 0, 1024, "32",
            "E2B directory watchers (files.watchDir, watch_dir) at once in the gateway, each an "
            "inotify instance of the gateway's user (fs.inotify.max_user_instances, 128 by "
            "default, is shared with every process of that user); past it a watch is refused "
            "(docs/e2b.md#watching-directories)"),
        OPT("watch-max-watchers-per-sandbox", OPT_INT, watch_max_watchers_per_sandbox, "N", 0,
            1024, "8", "E2B directory watchers at once in one sandbox"),
        OPT("watch-max-watchers-per-tenant", OPT_INT, watch_max_watchers_per_tenant, "N", 0,
            1024, "16",
            "E2B directory watchers at once in all of one tenant's sandboxes, so that one "
            "tenant cannot take every watcher of the gateway"),
        OPT("watch-max-dirs", OPT_INT, watch_max_dirs, "N", 1, 1000000, "8192",
            "directories watched at once by all watchers (a recursive watch watches each "
            "subdirectory; fs.inotify.max_user_watches bounds the gateway's user); past it "
            "further subdirectories are not watched and the watcher is told"),
        OPT("watch-max-dirs-per-sandbox", OPT_INT, watch_max_dirs_per_sandbox, "N", 1, 1000000,
            "1024", "directories watched at once by one sandbox's watchers"),
        OPT("watch-max-dirs-per-tenant", OPT_INT, watch_max_dirs_per_tenant, "N", 1, 1000000,
            "4096", "directories watched at once by the watchers of one tenant's sandboxes"),
        OPT("watch-queue-events", OPT_INT, watch_queue_events, "N", 16, 1000000, "1024",
            "events a watcher holds for its client; past it events are dropped and the client "
            "is told how many, in the events themselves"),
        OPT_SHOWN("egress-allow", OPT_LIST, egress_allow, "RULES", NULL, "none: no network",
                  "what sandboxes that ask for egress may reach: IPv4 addresses, CIDR blocks and "
                  "domain names (with their subdomains), comma-separated (repeatable; "
                  "docs/isolation-and-network.md#network-egress-off-by-default)"),
        OPT("egress-deny", OPT_LIST, egress_deny, "RULES", 0, 0, NULL,
            "what sandboxes never reach, whatever is allowed (same form; repeatable). Loopback, "
            "link-local (169.254.169.254 too) and this host's addresses are denied unless "
            "--egress-allow names them"),
        OPT_SHOWN("egress-dns", OPT_STRING, egress_dns, "IP[#PORT]", "",
                  "the first IPv4 nameserver of /etc/resolv.conf",
                  "upstream resolver the sandboxes' own resolvers ask about allowed domain "
                  "names"),
        OPT("egress-rate-kib", OPT_INT, egress_rate_kib, "N", 0, 1 << 30, "10240",
            "bandwidth cap of a sandbox with egress, KiB/s each way (0: none)"),
        OPT("egress-max-connections", OPT_INT, egress_max_connections, "N", 0, 1 << 20, "256",
            "connections a sandbox with egress may have open at once, TCP and UDP flows alike; "
            "past it a new one is refused (0: no cap)"),
        OPT_SHOWN("pool", OPT_LIST, pool, "NAME=N", NULL,
                  "2 of the default kernelspec, sandboxed; none turns it off",
                  "keep N started, idle, sandboxed kernels of kernelspec NAME ready (repeatable; "
                  "docs/performance.md#the-warm-pool)"),
        OPT("pool-preimport", OPT_LIST, pool_preimport, "NAME=CODE", 0, 0, NULL,
            "run CODE (import numpy, pandas) in pooled NAME kernels before they are handed out "
            "(repeatable; also metadata.glovebox.preimport in a kernel.json)"),
        OPT("pool-min-available-mb", OPT_INT, pool_min_available_mb, "N", 0, 1 << 30, "1024",
            "below this much available memory the pool stops refilling and shrinks"),
        OPT_SHOWN("host-id", OPT_STRING, host_id, "NAME", "", "none: a single host",
                  "this host's name in a fleet, 1 to 6 of a-z and 0-9: every kernel, session, "
                  "MCP session and E2B sandbox id names it, for a front proxy to route by; a "
                  "--peer with the same one refuses this start and every call between the two "
                  "(docs/several-hosts.md#a-duplicate-host-id)"),
        OPT("agent-listen", OPT_STRING, agent_listen, "ADDRESS:PORT", 0, 0, "",
            "where to answer HAProxy's agent-check: up ready N% (free capacity) or drain"),
        OPT("peer", OPT_LIST, peers, "URL", 0, 0, NULL,
            "http://ADDRESS:PORT (numeric) of another gateway of the fleet (repeatable, at most "
            "32; needs --host-id): lists of kernels, sessions and E2B sandboxes include theirs"),
        OPT("peer-timeout", OPT_DOUBLE, peer_timeout, "S", 0.1, 60, "2",
            "seconds a list waits for the peers; one that has not answered is left out and "
            "named in X-Glovebox-Fleet-Missing"),
        OPT("criu", OPT_STRING, criu, "PATH", 0, 0, "criu",
            "the CRIU program that checkpoints sandboxes for pause with memory (4.1 or newer; a "
            "path, or a name looked up on PATH and in the sbin directories); without it, or "
            "without --state-dir or root, pause keeps files only (docs/pause.md)"),
        OPT_SHOWN("zygote", OPT_LIST, zygote, "NAME:MODULE,...", NULL,
                  "as root, the default kernelspec's, numpy?,pandas?,matplotlib.pyplot? "
                  "(docs/performance.md#fast-by-default); none turns it off",
                  "start kernelspec NAME's kernels by forking them from one process that "
                  "imported ipykernel and the modules once, as "
                  "python3:numpy,pandas,matplotlib.pyplot; MODULE? is imported where "
                  "installed (repeatable, at most 8; Python kernelspecs of the Python glovebox "
                  "was built with; needs root; docs/performance.md#zygotes)"),
        OPT_SHOWN("static-dir", OPT_STRING, static_dir, "DIR", "",
                  "the source tree's static/ run from the build tree, else the installed one",
                  "the web page's files"),
        OPT("log-level", OPT_STRING, log_level, "LEVEL", 0, 0, "info",
            "debug, info, warn or error; debug also shows the kernels' own stdout and stderr"),
        OPT("log-format", OPT_STRING, log_format, "text|json", 0, 0, "text",
            "json: one JSON object a line, {time, level, component, kernel?, message}, from the "
            "gateway and the kernel-host alike; audit lines carry their fields as members "
            "(docs/operations.md#logs)"),
        OPT("log-rate-limit", OPT_INT, log_rate_limit, "N", 0, 1000000, "10",
            "lines a second of one repeated warning per kernel (bad signatures, bad client "
            "frames); the rest are counted in one line once the second is over (0: none)"),
        OPT("access-log", OPT_STRING, access_log, "all|errors|off", 0, 0, "all",
            "a line per HTTP request and per WebSocket at its end: method, route class, status, "
            "bytes, duration, tenant (never a path, a query or a credential); errors: only "
            "statuses of 400 and above (docs/operations.md#access-log)"),
        OPT("check-config", OPT_FLAG, check_config, "", 0, 0, NULL,
            "validate the configuration (a --keys-file and the templates too) and exit"),
        OPT("hash-key", OPT_FLAG, hash_key, "", 0, 0, NULL,
            "read a key on stdin (its first line), print its SHA-256 for --keys-file, and exit"),
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static const struct option_def *find_option(const char *name, size_t len)
{
        for (size_t i = 0; i < NOPTIONS; i++) {
                if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
                        return &options[i];
        }
        return NULL;
}

static int set_option(struct config *cfg, const struct option_def *o, const char *value)
{
        char *field = (char *)cfg + o->offset;
        char *end;

        switch (o->type) {
        case OPT_STRING: {
                char **s = (char **)(void *)field;
                char *copy = strdup(value);

                if (!copy)
                        return -ENOMEM;
                free(*s);
                *s = copy;
                return 0;
        }
        case OPT_LIST: {
                char ***list = (char ***)(void *)field;
                size_t n = 0;
                char **grown;

                while (*list && (*list)[n])
                        n++;
                grown = realloc(*list, (n + 2) * sizeof(char *));
                if (!grown)
                        return -ENOMEM;
                *list = grown;
                grown[n] = strdup(value);
                grown[n + 1] = NULL;
                return grown[n] ? 0 : -ENOMEM;
        }
        case OPT_FLAG:
                if (strcmp(value, "true") != 0 && strcmp(value, "false") != 0)
                        goto bad;
                *(bool *)(void *)field = strcmp(value, "true") == 0;
                return 0;
        case OPT_INT: {
                long long v;

                errno = 0;
                v = strtoll(value, &end, 10);
                if (errno || end == value || *end || (double)v < o->min || (double)v > o->max)
                        goto bad;
                *(int64_t *)(void *)field = v;
                return 0;
        }
        case OPT_DOUBLE: {
                double v;

                errno = 0;
                v = strtod(value, &end);
                if (errno || end == value || *end || !isfinite(v) || v < o->min || v > o->max)
                        goto bad;
                *(double *)(void *)field = v;
                return 0;
        }
        }
bad:
        if (o->type == OPT_FLAG)
                fprintf(stderr, "glovebox: --%s takes no value (or true/false)\n", o->name);
        else if (o->type == OPT_STRING || o->type == OPT_LIST)
                fprintf(stderr, "glovebox: bad value for --%s\n", o->name);
        else if (o->type == OPT_INT)
                fprintf(stderr,
                        "glovebox: --%s must be a whole number from %.0f to %.0f, not '%s'\n",
                        o->name, o->min, o->max, value);
        else
                fprintf(stderr, "glovebox: --%s must be a number from %g to %g, not '%s'\n",
                        o->name, o->min, o->max, value);
        return -EINVAL;
}

int config_set(struct config *cfg, const char *name, const char *value)
{
        const struct option_def *o = find_option(name, strlen(name));

        return o ? set_option(cfg, o, value) : -EINVAL;
}

static int load_file(struct config *cfg, const char *path)
{
        struct stat st;
        json_error_t jerr;
        json_t *root = json_load_file(path, 0, &jerr);
        const char *key;
        json_t *value;
        int rc = 0;

        if (!json_is_object(root)) {
                fprintf(stderr, "glovebox: --config %s: %s\n", path,
                        root ? "not a JSON object" : jerr.text);
                json_decref(root);
                return -EINVAL;
        }
        json_object_foreach(root, key, value) {
                const struct option_def *o = find_option(key, strlen(key));
                char text[64];
                const char *s = text;

                if (!o || strcmp(key, "check-config") == 0) {
                        fprintf(stderr, "glovebox: --config %s: unknown option \"%s\"\n", path, key);
                        rc = -EINVAL;
                        break;
                }
                if (o->type == OPT_LIST && json_is_array(value)) {
                        size_t i;
                        json_t *item;

                        json_array_foreach (value, i, item) {
                                rc = set_option(cfg, o,
                                                json_is_string(item) ? json_string_value(item) : "");
                                if (rc < 0)
                                        break;
                        }
                        if (rc < 0)
                                break;
                        continue;
                }
                if (json_is_string(value))
                        s = json_string_value(value);
                else if (json_is_boolean(value))
                        s = json_is_true(value) ? "true" : "false";
                else if (json_is_integer(value))
                        snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(value));
                else if (json_is_real(value))
                        snprintf(text, sizeof(text), "%.17g", json_real_value(value));
                else
                        s = "";
                rc = set_option(cfg, o, s);
                if (rc < 0)
                        break;
                if (o->offset == offsetof(struct config, token))
                        cfg->token_source = CONFIG_TOKEN_CONFIG;
        }
        /* A file that holds the token is a token file: the same warning. */
        if (rc == 0 && cfg->token_source == CONFIG_TOKEN_CONFIG && stat(path, &st) == 0 &&
            (st.st_mode & (S_IROTH | S_IWOTH)))
                fprintf(stderr,
                        "glovebox: warning: --config %s holds the token and is readable or "
                        "writable by every user (chmod o-rw)\n",
                        path);
        json_decref(root);
        return rc;
}

int config_option_doc(size_t i, struct config_option_doc *doc)
{
        const struct option_def *o;

        if (i >= NOPTIONS)
                return -ENOENT;
        o = &options[i];
        doc->name = o->name;
        doc->arg = o->arg;
        doc->help = o->help;
        doc->dflt = o->shown ? o->shown : o->dflt && o->type != OPT_FLAG ? o->dflt : "";
        doc->dflt_is_value = !o->shown;
        return 0;
}
static const struct config *current;

const struct config *config_get(void)
{
        return current;
}

int config_load(struct config *cfg, int argc, char **argv)
{
        const char *env_token = getenv("GLOVEBOX_TOKEN");
        int rc;

        memset(cfg, 0, sizeof(*cfg));
        current = cfg;
        for (size_t i = 0; i < NOPTIONS; i++) {
                if (options[i].dflt && set_option(cfg, &options[i], options[i].dflt) < 0)
                        return -EINVAL;
        }
        if (env_token && *env_token) {
                if (set_option(cfg, find_option("token", 5), env_token) < 0)
                        return -EINVAL;
                cfg->token_source = CONFIG_TOKEN_ENV;
        }
        /* A --config file first, so the command line overrides it. */
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
                        rc = load_file(cfg, argv[i + 1]);
                        if (rc < 0)
                                return rc;
                } else if (strncmp(argv[i], "--config=", 9) == 0) {
                        rc = load_file(cfg, argv[i] + 9);
                        if (rc < 0)
                                return rc;
                }
        }
        for (int i = 1; i < argc; i++) {
                const char *arg = argv[i];
                const char *eq;
                const struct option_def *o;

                if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
                        config_print_help(argv[0]);
                        return 1;
                }
                if (strcmp(arg, "--help-markdown") == 0) {
                        config_print_markdown();
                        return 1;
                }
                if (strcmp(arg, "--version") == 0) {
                        printf("glovebox %s\n", PACKAGE_VERSION);
                        return 1;
                }
                if (strcmp(arg, "--config") == 0) {
                        i++;
                        continue;
                }
                if (strncmp(arg, "--config=", 9) == 0)
                        continue;
                if (strncmp(arg, "--", 2) != 0) {
                        fprintf(stderr, "glovebox: unexpected argument '%s' (see --help)\n", arg);
                        return -EINVAL;
                }
                arg += 2;
                eq = strchr(arg, '=');
                o = find_option(arg, eq ? (size_t)(eq - arg) : strlen(arg));
                if (!o) {
                        fprintf(stderr, "glovebox: unknown option '%s' (see --help)\n", argv[i]);
                        return -EINVAL;
                }
                if (eq) {
                        rc = set_option(cfg, o, eq + 1);
                } else if (o->type == OPT_FLAG) {
                        rc = set_option(cfg, o, "true");
                } else if (i + 1 < argc) {
                        rc = set_option(cfg, o, argv[++i]);
                } else {
                        fprintf(stderr, "glovebox: --%s needs a value\n", o->name);
                        rc = -EINVAL;
                }
                if (rc < 0)
                        return rc;
                if (o->offset == offsetof(struct config, token))
                        cfg->token_source = CONFIG_TOKEN_ARGV;
        }
        return config_validate(cfg);
}

void config_free(struct config *cfg)
{
        for (size_t i = 0; i < NOPTIONS; i++) {
                char *field = (char *)cfg + options[i].offset;

                if (options[i].type == OPT_STRING) {
                        char **s = (char **)(void *)field;

                        free(*s);
                        *s = NULL;
                } else if (options[i].type == OPT_LIST) {
                        char ***list = (char ***)(void *)field;

                        for (size_t j = 0; *list && (*list)[j]; j++)
                                free((*list)[j]);
                        free(*list);
                        *list = NULL;
                }
        }
}
