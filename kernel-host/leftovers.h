/* What a run that ended without cleaning up left behind: its runtime
 * directory (sandbox directories, sockets of kernels without a sandbox)
 * and its kernel-hosts' cgroups, with any process still in them.
 *
 * A gateway holds a shared lock on ".lock" in its runtime directory for as
 * long as it runs, and so does each of its kernel-hosts; each kernel-host
 * writes a record, "host-<pid>", naming its cgroups. At start a kernel-host
 * removes what its predecessors in the same runtime directory left (the
 * gateway starts one only after the last one died), and every sibling
 * runtime directory (glovebox-XXXXXX beside ours, ours by owner) whose lock
 * nobody holds any more: a run still alive is never touched, and a
 * directory without a lock (made by an older version, or not finished) is
 * left alone. */
#ifndef GLOVEBOX_LEFTOVERS_H
#define GLOVEBOX_LEFTOVERS_H

/* Takes our lock in runtime_dir and removes what earlier runs left there
 * and beside it, saying so in one line if there was anything. Needs
 * cgroup_init first. 0 or -errno (logged). */
int leftovers_remove(const char *runtime_dir);
/* Writes our record (our cgroups), for a successor if we die. */
int leftovers_record_write(void);
/* Removes our record and lets go of the lock (at a clean exit). */
void leftovers_record_remove(void);

#endif
