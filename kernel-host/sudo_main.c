/* glovebox-sudo: E2B's passwordless sudo, inside a sandbox, without setuid.
 *
 * E2B's sandbox user may run anything as root with sudo. A Glovebox
 * sandbox has no setuid program that could work (every process runs with
 * no_new_privs), so root's side is a service: the kernel-host starts
 * `glovebox-sudo --serve` in the sandboxes that offer sudo (E2B's), as the
 * sandbox's root, confined exactly as any command run as root is (its own
 * root of the sandbox's user namespace, an unprivileged host id, the
 * file-ownership capabilities, no_new_privs, the seccomp filter). It
 * listens on SUDO_SOCKET, in a directory only that root may write.
 *
 * `sudo COMMAND` (this program under the name sudo, first on the
 * sandbox's PATH) connects, sends its working directory, the command, the
 * environment sudo would keep and its standard input, output and error
 * (SCM_RIGHTS), and waits: the service forks, the child takes those
 * descriptors and runs the command as root; its exit status comes back and
 * becomes sudo's own. A signal sent to sudo (^C, a kill) goes on to the
 * command. What this gives the sandbox's user is what E2B's sudo gives:
 * the sandbox's root, which is nothing on the host. Everything crosses the
 * sandbox's own socket; nothing of it reaches the kernel-host or the
 * gateway.
 *
 * Only root and the sandbox's user exist here: `-u root` (the default)
 * goes through the service, `-u user` runs the command directly. */
#include "autoconf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SUDO_DIR     "/run/glovebox-sudo"
#define SUDO_SOCKET  SUDO_DIR "/socket"
#define REQUEST_MAX  (128 * 1024) /* cwd, argv and env of one request */
#define CLIENTS_MAX  64           /* commands running at once */
#define SERVICE_WAIT_S 10.0         /* how long sudo waits for the service to start */
#define SECURE_PATH  "/opt/glovebox/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define ROOT_SHELL   "/bin/bash"
#define ROOT_HOME    "/root"
#define USER_NAME    "user"

extern char **environ;

/* ---- the request -------------------------------------------------------- */

/* A request is NUL-terminated strings: the cwd, then the number of
 * arguments in decimal and the arguments, then the number of environment
 * entries and the entries. (A count, not an end mark: an argument may be
 * empty, as in `sudo echo ""`.) */
struct request {
        char *cwd;
        char **argv;
        char **envp;
};

#define VECTOR_MAX 65536 /* arguments or environment entries in one request */

/* Appends s and its NUL to buf (of REQUEST_MAX): 0 or -E2BIG. */
static int put(char *buf, size_t *len, const char *s)
{
        size_t n = strlen(s) + 1;

        if (*len + n > REQUEST_MAX)
                return -E2BIG;
        memcpy(buf + *len, s, n);
        *len += n;
        return 0;
}

static int put_counted(char *buf, size_t *len, size_t *count, const char *s)
{
        int rc = put(buf, len, s);

        if (rc == 0)
                (*count)++;
        return rc;
}

static int put_count(char *buf, size_t *len, size_t count)
{
        char text[24];

        snprintf(text, sizeof(text), "%zu", count);
        return put(buf, len, text);
}

/* The next string of buf (len bytes) at *at, or NULL past the end. */
static char *next(char *buf, size_t len, size_t *at)
{
        char *s = buf + *at;

        if (*at >= len || !memchr(s, '\0', len - *at))
                return NULL;
        *at += strlen(s) + 1;
        return s;
}

/* A count, then that many strings, into a new NULL-terminated vector
 * (caller frees the vector, not the strings): NULL when malformed or out
 * of memory. */
static char **take_vector(char *buf, size_t len, size_t *at)
{
        char *count = next(buf, len, at), *end;
        unsigned long n;
        char **v;

        if (!count || !*count || strspn(count, "0123456789") != strlen(count))
                return NULL;
        n = strtoul(count, &end, 10);
        if (n > VECTOR_MAX)
                return NULL;
        v = calloc(n + 1, sizeof(char *));
        for (size_t i = 0; v && i < n; i++) {
                v[i] = next(buf, len, at);
                if (!v[i]) {
                        free(v);
                        return NULL;
                }
        }
        return v;
}

static int parse_request(char *buf, size_t len, struct request *req)
{
        size_t at = 0;

        memset(req, 0, sizeof(*req));
        req->cwd = next(buf, len, &at);
        if (req->cwd)
                req->argv = take_vector(buf, len, &at);
        if (req->argv)
                req->envp = take_vector(buf, len, &at);
        if (!req->argv || !req->envp || !req->argv[0] || at != len) {
                free(req->argv);
                free(req->envp);
                return -EINVAL;
        }
        return 0;
}

/* ---- the service (as the sandbox's root) ------------------------------- */

struct client {
        int fd;     /* the connection, or -1: a free slot */
        pid_t pid;  /* the command, or 0 before it runs */
};

static struct client clients[CLIENTS_MAX];

static void client_end(struct client *c)
{
        close(c->fd);
        c->fd = -1;
        c->pid = 0;
}

/* The command's child: the caller's descriptors as its stdio, its own
 * session, the caller's directory (or root's home when it is gone), exec. */
static __attribute__((noreturn)) void run_child(const struct request *req, const int fds[3])
{
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        setsid();
        for (int i = 0; i < 3; i++) {
                if (dup2(fds[i], i) < 0)
                        _exit(126);
        }
        for (int fd = 3; fd < 1024; fd++)
                close(fd);
        if (chdir(req->cwd) < 0 && chdir(ROOT_HOME) < 0 && chdir("/") < 0)
                _exit(126);
        execvpe(req->argv[0], req->argv, req->envp);
        dprintf(2, "sudo: %s: %s\n", req->argv[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
}

/* Reads one request with its three descriptors from c and starts it. */
static void client_start(struct client *c)
{
        static char buf[REQUEST_MAX];
        char control[CMSG_SPACE(3 * sizeof(int))];
        struct iovec iov = {buf, sizeof(buf)};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                            .msg_controllen = sizeof(control)};
        int fds[3] = {-1, -1, -1}, nfds = 0;
        struct request req;
        ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);

        for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); n > 0 && h; h = CMSG_NXTHDR(&mh, h)) {
                if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
                        nfds = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                        memcpy(fds, CMSG_DATA(h), (size_t)(nfds > 3 ? 3 : nfds) * sizeof(int));
                }
        }
        if (n <= 0 || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || nfds != 3 ||
            parse_request(buf, (size_t)n, &req) < 0) {
                client_end(c);
                goto out;
        }
        c->pid = fork();
        if (c->pid == 0)
                run_child(&req, fds);
        free(req.argv);
        free(req.envp);
        if (c->pid < 0)
                client_end(c);
out:
        for (int i = 0; i < 3; i++) {
                if (fds[i] >= 0)
                        close(fds[i]);
        }
}

/* A byte from a running command's client: a signal for the command. */
static void client_signal(struct client *c)
{
        unsigned char sig;
        ssize_t n = recv(c->fd, &sig, 1, 0);

        if (n == 1 && (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT))
                kill(-c->pid, sig);
        else if (n <= 0) {
                /* sudo itself is gone: so is what it ran. The slot stays
                 * taken until the command is reaped. */
                kill(-c->pid, SIGHUP);
                kill(-c->pid, SIGTERM);
                close(c->fd);
                c->fd = -1;
        }
}

static void reap(void)
{
        int status;
        pid_t pid;

        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
                for (size_t i = 0; i < CLIENTS_MAX; i++) {
                        if (clients[i].pid != pid)
                                continue;
                        if (clients[i].fd >= 0) {
                                (void)send(clients[i].fd, &status, sizeof(status), MSG_NOSIGNAL);
                                close(clients[i].fd);
                        }
                        clients[i].fd = -1;
                        clients[i].pid = 0;
                }
        }
}

static int serve(void)
{
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        struct pollfd pfd[CLIENTS_MAX + 2];
        sigset_t set;
        int lfd, sfd;

        for (size_t i = 0; i < CLIENTS_MAX; i++)
                clients[i].fd = -1;
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        sigprocmask(SIG_BLOCK, &set, NULL);
        signal(SIGPIPE, SIG_IGN);
        sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        /* Root's own directory: nobody else can put anything at the
         * socket's name, or take it away. */
        umask(022);
        if (mkdir(SUDO_DIR, 0755) < 0 && errno != EEXIST)
                return -errno;
        unlink(SUDO_SOCKET);
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", SUDO_SOCKET);
        lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (sfd < 0 || lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
            chmod(SUDO_SOCKET, 0666) < 0 || listen(lfd, 16) < 0)
                return -errno;
        /* Whoever started us (the gateway) waits for this line; then our
         * stdio is nobody's, so that its pipes close. */
        if (write(1, "ready\n", 6) != 6)
                return -EPIPE;
        {
                int null = open("/dev/null", O_RDWR | O_CLOEXEC);

                if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
                        return -errno;
                close(null);
        }
        for (;;) {
                size_t n = 0;

                pfd[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
                pfd[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
                /* A negative fd is skipped by poll: a free slot, or a
                 * command whose sudo left. */
                for (size_t i = 0; i < CLIENTS_MAX; i++)
                        pfd[n++] = (struct pollfd){.fd = clients[i].fd, .events = POLLIN};
                if (poll(pfd, n, -1) < 0 && errno != EINTR)
                        return -errno;
                if (pfd[0].revents) {
                        struct signalfd_siginfo si;

                        while (read(sfd, &si, sizeof(si)) == sizeof(si))
                                ;
                        reap();
                }
                for (size_t i = 0; i < CLIENTS_MAX; i++) {
                        if (clients[i].fd < 0 || !pfd[i + 2].revents)
                                continue;
                        if (clients[i].pid == 0)
                                client_start(&clients[i]);
                        else
                                client_signal(&clients[i]);
                }
                if (pfd[1].revents) {
                        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                        size_t i = 0;

                        while (fd >= 0 && i < CLIENTS_MAX &&
                               (clients[i].fd >= 0 || clients[i].pid != 0))
                                i++;
                        if (fd >= 0 && i == CLIENTS_MAX)
                                close(fd); /* sudo says the service is busy */
                        else if (fd >= 0)
                                clients[i].fd = fd;
                }
        }
}

/* ---- sudo (as the sandbox's user) --------------------------------------- */

static void usage(void)
{
        fprintf(stderr, "usage: sudo [-E] [-H] [-n] [-i | -s] [-u root|" USER_NAME "] "
                        "[--] [command [arg ...]]\n"
                        "       sudo -l | -v | -k\n"
                        "Glovebox's sudo: the sandbox's user may run anything as the "
                        "sandbox's root, without a password (as in E2B).\n");
        exit(1);
}

/* The environment sudo keeps by default (env_reset), then what it sets. */
static int root_environment_entries(char *buf, size_t *len, bool keep_all, const char *caller,
                                   size_t *count);

/* The environment's count, then its entries. */
static int root_environment(char *buf, size_t *len, bool keep_all, const char *caller)
{
        static char entries[REQUEST_MAX];
        size_t elen = 0, count = 0;
        int rc = root_environment_entries(entries, &elen, keep_all, caller, &count);

        if (rc == 0)
                rc = put_count(buf, len, count);
        if (rc == 0 && *len + elen > REQUEST_MAX)
                rc = -E2BIG;
        if (rc == 0) {
                memcpy(buf + *len, entries, elen);
                *len += elen;
        }
        return rc;
}

static int root_environment_entries(char *buf, size_t *len, bool keep_all, const char *caller,
                                   size_t *count)
{
        static const char *const kept[] = {"TERM=", "LANG=", "LANGUAGE=", "LC_", "TZ=",
                                           "COLORTERM=", "DISPLAY=", NULL};
        char line[PATH_MAX + 64];
        int rc = 0;

        for (char **e = environ; rc == 0 && e && *e; e++) {
                bool keep = keep_all;

                for (size_t i = 0; !keep && kept[i]; i++)
                        keep = strncmp(*e, kept[i], strlen(kept[i])) == 0;
                if (strncmp(*e, "HOME=", 5) == 0 || strncmp(*e, "USER=", 5) == 0 ||
                    strncmp(*e, "LOGNAME=", 8) == 0 || strncmp(*e, "SHELL=", 6) == 0 ||
                    strncmp(*e, "SUDO_", 5) == 0 || (!keep_all && strncmp(*e, "PATH=", 5) == 0))
                        keep = false;
                if (keep)
                        rc = put_counted(buf, len, count, *e);
        }
        if (!keep_all && rc == 0)
                rc = put_counted(buf, len, count, "PATH=" SECURE_PATH);
        snprintf(line, sizeof(line), "SUDO_USER=%s", caller);
        if (rc == 0)
                rc = put_counted(buf, len, count, line);
        snprintf(line, sizeof(line), "SUDO_UID=%u", (unsigned)getuid());
        if (rc == 0)
                rc = put_counted(buf, len, count, line);
        snprintf(line, sizeof(line), "SUDO_GID=%u", (unsigned)getgid());
        if (rc == 0)
                rc = put_counted(buf, len, count, line);
        for (const char *const *s = (const char *const[]){"HOME=" ROOT_HOME, "USER=root",
                                                          "LOGNAME=root", "SHELL=" ROOT_SHELL,
                                                          NULL};
             rc == 0 && *s; s++)
                rc = put_counted(buf, len, count, *s);
        return rc;
}

static int forwarded_fd = -1;

static void forward(int sig)
{
        unsigned char b = (unsigned char)sig;

        if (forwarded_fd >= 0)
                (void)send(forwarded_fd, &b, 1, MSG_NOSIGNAL);
}

static double seconds_now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Connects fd to the service. In an E2B sandbox (E2B_SANDBOX=true, which
 * its commands and kernels have) the service starts as the sandbox is
 * handed out, not before: a service not there yet, or not listening yet,
 * is waited for, up to SERVICE_WAIT_S. Elsewhere there is none to wait
 * for. 0, or -1 with errno. */
static int connect_service(int fd, const struct sockaddr_un *addr)
{
        const char *e2b = getenv("E2B_SANDBOX");
        double give_up = seconds_now() + SERVICE_WAIT_S;

        for (;;) {
                struct timespec pause = {0, 5 * 1000 * 1000};

                if (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0)
                        return 0;
                if ((errno != ENOENT && errno != ECONNREFUSED) || !e2b ||
                    strcmp(e2b, "true") != 0 || seconds_now() > give_up)
                        return -1;
                nanosleep(&pause, NULL);
        }
}

/* Runs argv as root through the service; returns sudo's exit status. */
static int as_root(char **argv, const char *cwd, bool keep_env, const char *caller)
{
        static char buf[REQUEST_MAX];
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        int fds[3] = {0, 1, 2}, fd, status, sndbuf = REQUEST_MAX + 4096;
        char control[CMSG_SPACE(sizeof(fds))];
        struct iovec iov = {buf, 0};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                            .msg_controllen = sizeof(control)};
        struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
        size_t len = 0, nargs = 0;
        int rc = put(buf, &len, cwd);
        ssize_t n;

        while (argv[nargs])
                nargs++;
        if (rc == 0)
                rc = put_count(buf, &len, nargs);
        for (char **a = argv; rc == 0 && *a; a++)
                rc = put(buf, &len, *a);
        if (rc == 0)
                rc = root_environment(buf, &len, keep_env, caller);
        if (rc < 0) {
                fprintf(stderr, "sudo: the command and its environment are over %d bytes\n",
                        REQUEST_MAX);
                return 1;
        }
        iov.iov_len = len;
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(fds));
        memcpy(CMSG_DATA(h), fds, sizeof(fds));
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", SUDO_SOCKET);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0 ||
            connect_service(fd, &addr) < 0) {
                fprintf(stderr,
                        "sudo: this sandbox offers no sudo (Glovebox's sudo service is not "
                        "running: %s)\n",
                        strerror(errno));
                return 1;
        }
        if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t)len) {
                fprintf(stderr, "sudo: cannot reach the sudo service: %s\n", strerror(errno));
                return 1;
        }
        forwarded_fd = fd;
        signal(SIGINT, forward);
        signal(SIGTERM, forward);
        signal(SIGHUP, forward);
        signal(SIGQUIT, forward);
        do {
                n = recv(fd, &status, sizeof(status), 0);
        } while (n < 0 && errno == EINTR);
        if (n != sizeof(status)) {
                fprintf(stderr, "sudo: the sudo service is busy or gone\n");
                return 1;
        }
        if (WIFSIGNALED(status)) {
                signal(WTERMSIG(status), SIG_DFL);
                raise(WTERMSIG(status));
                return 128 + WTERMSIG(status);
        }
        return WEXITSTATUS(status);
}

static int sudo(int argc, char **argv)
{
        const char *user = "root", *shell = NULL;
        bool keep_env = false, login = false;
        char cwd[PATH_MAX], caller[64];
        struct passwd *pw = getpwuid(getuid());
        char *cmd[5]; /* a shell, -l, -c, the line, NULL */
        int i = 1, n = 0;

        snprintf(caller, sizeof(caller), "%s", pw ? pw->pw_name : USER_NAME);
        for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
                const char *o = argv[i];

                if (strcmp(o, "--") == 0) {
                        i++;
                        break;
                }
                if (strcmp(o, "-u") == 0 && i + 1 < argc)
                        user = argv[++i];
                else if (strncmp(o, "-u", 2) == 0 && o[2])
                        user = o + 2;
                else if (strcmp(o, "-E") == 0 || strcmp(o, "--preserve-env") == 0)
                        keep_env = true;
                else if (strcmp(o, "-i") == 0 || strcmp(o, "--login") == 0)
                        login = true;
                else if (strcmp(o, "-s") == 0 || strcmp(o, "--shell") == 0)
                        shell = ROOT_SHELL;
                else if (strcmp(o, "-H") == 0 || strcmp(o, "-n") == 0 || strcmp(o, "-S") == 0 ||
                         strcmp(o, "--non-interactive") == 0 || strcmp(o, "--set-home") == 0)
                        ; /* no password to ask for; HOME is root's anyway */
                else if (strcmp(o, "-v") == 0 || strcmp(o, "-k") == 0 || strcmp(o, "-K") == 0)
                        return 0; /* no credentials to cache or forget */
                else if (strcmp(o, "-l") == 0) {
                        printf("User %s may run the following commands on this sandbox:\n"
                               "    (ALL : ALL) NOPASSWD: ALL\n",
                               caller);
                        return 0;
                } else if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0)
                        usage();
                else {
                        fprintf(stderr, "sudo: option %s is not supported by Glovebox's sudo\n",
                                o);
                        usage();
                }
        }
        if (login || shell) {
                cmd[n++] = login ? "-bash" : (char *)ROOT_SHELL;
                if (i < argc) {
                        /* sudo -s CMD runs CMD through the shell. */
                        size_t len = 1;
                        char *line;

                        for (int j = i; j < argc; j++)
                                len += strlen(argv[j]) + 1;
                        line = calloc(1, len);
                        if (!line)
                                return 1;
                        len = 0;
                        for (int j = i; j < argc; j++) {
                                size_t alen = strlen(argv[j]);

                                memcpy(line + len, argv[j], alen);
                                len += alen;
                                line[len++] = j + 1 < argc ? ' ' : '\0';
                        }
                        cmd[n++] = "-c";
                        cmd[n++] = line;
                }
                cmd[n] = NULL;
        } else if (i == argc)
                usage();
        if (strcmp(user, "root") != 0 && strcmp(user, "0") != 0 && strcmp(user, "#0") != 0) {
                if (strcmp(user, caller) != 0) {
                        fprintf(stderr, "sudo: unknown user %s (this sandbox has root and %s)\n",
                                user, caller);
                        return 1;
                }
                /* Oneself: nothing to ask anyone. */
                execvp(n ? ROOT_SHELL : argv[i], n ? cmd : argv + i);
                fprintf(stderr, "sudo: %s: %s\n", argv[i], strerror(errno));
                return errno == ENOENT ? 127 : 126;
        }
        if (login)
                snprintf(cwd, sizeof(cwd), "%s", ROOT_HOME);
        else if (!getcwd(cwd, sizeof(cwd)))
                snprintf(cwd, sizeof(cwd), "/");
        if (n) {
                /* The login shell's argv[0] says "login"; exec runs bash. */
                cmd[0] = (char *)ROOT_SHELL;
                if (login) {
                        memmove(cmd + 2, cmd + 1, (size_t)n * sizeof(char *));
                        cmd[1] = "-l";
                }
                return as_root(cmd, cwd, keep_env, caller);
        }
        return as_root(argv + i, cwd, keep_env, caller);
}

int main(int argc, char **argv)
{
        if (argc == 2 && strcmp(argv[1], "--serve") == 0) {
                int rc = serve();

                fprintf(stderr, "glovebox-sudo: %s\n", strerror(-rc));
                return 1;
        }
        return sudo(argc, argv);
}
