/* A command's streams through a checkpoint: its pipes to the gateway, or
 * its terminal, whose master the gateway holds. The dump records what the
 * sandbox holds (pipe inodes, the terminal's device) and names a terminal
 * external; the restore makes new pipes or a new terminal in their place,
 * hands the sandbox's ends to criu (--inherit-fd) and the gateway's to the
 * gateway, as at the command's start. */
#include "autoconf.h"

#include "kernel-host/spawn_internal.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernel-host/checkpoint_internal.h"

void checkpoint_streams_record(const struct proc *p, json_t *rec)
{
        /* A command's pipes: the restore gives it new ones. */
        if (p->pipes[0] && p->pipes[1] && p->pipes[2])
                json_object_set_new(rec, "pipes",
                                    json_pack("[I, I, I]", (json_int_t)p->pipes[0],
                                              (json_int_t)p->pipes[1], (json_int_t)p->pipes[2]));
        /* A command's terminal: the restore gives it a new one. */
        if (p->tty_rdev)
                json_object_set_new(
                    rec, "tty",
                    json_pack("[I, I]", (json_int_t)p->tty_rdev, (json_int_t)p->tty_dev));
}

int checkpoint_streams_dump_args(const struct box *b, char **argv, size_t *argc, char **owned,
                                 size_t *nowned, char *err, size_t errlen)
{
        size_t ttys = 0;

        /* A command's terminal: its master is the gateway's, outside. */
        for (struct proc *p = NULL; (p = spawn_proc_next(p));) {
                char *e = NULL;

                if (p->box != b || !p->tty_rdev)
                        continue;
                if (++ttys > MAX_PROCS) {
                        snprintf(err, errlen, "more than %d commands on terminals", MAX_PROCS);
                        return -EOPNOTSUPP;
                }
                if (asprintf(&e, "tty[%" PRIx64 ":%" PRIx64 "]", (uint64_t)p->tty_rdev,
                             (uint64_t)p->tty_dev) < 0) {
                        snprintf(err, errlen, "out of memory");
                        return -ENOMEM;
                }
                owned[(*nowned)++] = e;
                argv[(*argc)++] = "--external";
                argv[(*argc)++] = e;
        }
        return 0;
}

/* A command's "pipes" (absent: none): three pipe inodes. 0 or -EBADMSG. */
static int record_pipes(json_t *pipes, ino_t out[3])
{
        out[0] = out[1] = out[2] = 0;
        if (!pipes)
                return 0;
        if (!json_is_array(pipes) || json_array_size(pipes) != 3)
                return -EBADMSG;
        for (size_t k = 0; k < 3; k++) {
                json_t *v = json_array_get(pipes, k);

                if (!json_is_integer(v) || json_integer_value(v) <= 0)
                        return -EBADMSG;
                out[k] = (ino_t)json_integer_value(v);
        }
        return 0;
}

/* A command's "tty" (absent: none): its peer's device and devpts
 * instance. 0 or -EBADMSG. */
static int record_tty(json_t *tty, unsigned long long out[2])
{
        out[0] = out[1] = 0;
        if (!tty)
                return 0;
        if (!json_is_array(tty) || json_array_size(tty) != 2 ||
            !json_is_integer(json_array_get(tty, 0)) || !json_is_integer(json_array_get(tty, 1)) ||
            json_integer_value(json_array_get(tty, 0)) <= 0 ||
            json_integer_value(json_array_get(tty, 1)) < 0)
                return -EBADMSG;
        out[0] = (unsigned long long)json_integer_value(json_array_get(tty, 0));
        out[1] = (unsigned long long)json_integer_value(json_array_get(tty, 1));
        return 0;
}

/* A new terminal for a command's old one, in a devpts instance of its
 * own, mounted nowhere: neither the host's ptys nor another sandbox's.
 * Its peer (*peer) is the sandbox user's, as at a command's start. 0 or
 * -errno. */
static int pty_make(const struct sandbox_ids *ids, int *master, int *peer)
{
        int fs, mnt = -1, rc;

        *master = *peer = -1;
        fs = fsopen("devpts", FSOPEN_CLOEXEC);
        if (fs >= 0 && fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0 &&
            (mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC)) >= 0)
                *master = openat(mnt, "ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
        rc = *master < 0 ? -errno : 0;
        if (fs >= 0)
                close(fs);
        if (mnt >= 0)
                close(mnt);
        return rc < 0 ? rc : sandbox_pty_of(master, ids, NULL, peer);
}

/* New terminals for the commands' old ones: the peer above REPORT_FD,
 * named to criu as the terminal it stands for (--inherit-fd
 * fd[N]:tty[RDEV:DEV], with --shell-job, which lets a session's terminal
 * come from outside the checkpoint). */
static int ttys_make(struct job *j, char **argv, size_t *argc, char **owned, size_t *nowned)
{
        bool any = false;

        for (size_t i = 0; i < j->nprocs; i++) {
                int master, peer, rc;
                char *arg;

                if (!j->procs[i].tty[0])
                        continue;
                rc = pty_make(&j->ids, &master, &peer);
                if (rc < 0)
                        return rc;
                j->procs[i].inside[0] = fcntl(peer, F_DUPFD_CLOEXEC, REPORT_FD + 1);
                j->procs[i].outside[0] = fcntl(master, F_DUPFD_CLOEXEC, REPORT_FD + 1);
                close(peer);
                close(master);
                if (j->procs[i].inside[0] < 0 || j->procs[i].outside[0] < 0)
                        return -EMFILE;
                if (asprintf(&arg, "fd[%d]:tty[%llx:%llx]", j->procs[i].inside[0],
                             j->procs[i].tty[0], j->procs[i].tty[1]) < 0)
                        return -ENOMEM;
                owned[(*nowned)++] = arg;
                argv[(*argc)++] = "--inherit-fd";
                argv[(*argc)++] = arg;
                any = true;
        }
        if (any)
                argv[(*argc)++] = "--shell-job";
        return 0;
}

/* New pipes for the commands' old ones: the sandbox's ends above
 * REPORT_FD, where the worker's dup2s cannot reach them, each named to
 * criu as the pipe it stands for (--inherit-fd fd[N]:pipe:[INODE]); and
 * new terminals (ttys_make). */
int checkpoint_streams_make(struct job *j, char **argv, size_t *argc, char **owned, size_t *nowned)
{
        int rc = ttys_make(j, argv, argc, owned, nowned);

        if (rc < 0)
                return rc;
        for (size_t i = 0; i < j->nprocs; i++) {
                if (!j->procs[i].pipes[0])
                        continue;
                for (int k = 0; k < 3; k++) {
                        int pair[2], in, out;
                        char *arg;

                        if (pipe2(pair, O_CLOEXEC) < 0)
                                return -errno;
                        /* stdin: the sandbox reads; stdout and stderr: it writes. */
                        in = fcntl(pair[k == 0 ? 0 : 1], F_DUPFD_CLOEXEC, REPORT_FD + 1);
                        out = fcntl(pair[k == 0 ? 1 : 0], F_DUPFD_CLOEXEC, REPORT_FD + 1);
                        close(pair[0]);
                        close(pair[1]);
                        j->procs[i].inside[k] = in;
                        j->procs[i].outside[k] = out;
                        if (in < 0 || out < 0)
                                return -EMFILE;
                        if (asprintf(&arg, "fd[%d]:pipe:[%llu]", in,
                                     (unsigned long long)j->procs[i].pipes[k]) < 0)
                                return -ENOMEM;
                        owned[(*nowned)++] = arg;
                        argv[(*argc)++] = "--inherit-fd";
                        argv[(*argc)++] = arg;
                }
        }
        return 0;
}

int checkpoint_streams_take(json_t *rec, struct job *j, size_t i)
{
        if (record_pipes(json_object_get(rec, "pipes"), j->procs[i].pipes) < 0 ||
            record_tty(json_object_get(rec, "tty"), j->procs[i].tty) < 0 ||
            (j->procs[i].pipes[0] && j->procs[i].tty[0]))
                return -EBADMSG;
        return 0;
}

void checkpoint_streams_hand_over(struct job *j, size_t i, struct proc *p, int link)
{
        struct hostmsg_started started = {0};
        size_t nfds = 3;
        json_t *msg;

        if (j->procs[i].outside[0] < 0)
                return;
        if (j->procs[i].tty[0]) {
                /* A terminal: the gateway's one descriptor is its master. */
                struct stat st;

                if (fstat(j->procs[i].inside[0], &st) == 0) {
                        p->tty_rdev = st.st_rdev;
                        p->tty_dev = st.st_dev;
                }
                nfds = 1;
        }
        for (int k = 0; k < 3 && nfds == 3; k++) {
                struct stat st;

                p->pipes[k] = fstat(j->procs[i].inside[k], &st) == 0 ? st.st_ino : 0;
        }
        snprintf(started.id, sizeof(started.id), "%s", p->id);
        started.pid = p->pid;
        msg = hostmsg_started_encode(&started);
        if (!msg || hostmsg_send(link, HOSTMSG_STARTED, msg, j->procs[i].outside, nfds) < 0)
                klog_warn(p->id, "cannot hand the restored command's pipes to the gateway");
        json_decref(msg);
}
