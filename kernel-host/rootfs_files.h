/* The files every sandbox has of Glovebox's own, as rootfs.c writes them
 * into its root: its users, names and profile, and pip as a sandbox with
 * no network needs it. Included by rootfs.c alone. */
#ifndef GLOVEBOX_ROOTFS_FILES_H
#define GLOVEBOX_ROOTFS_FILES_H

static const char passwd_file[] = "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                  "user:x:1000:1000:user:/home/user:/bin/bash\n"
                                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
static const char group_file[] = "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n";
static const char hosts_file[] = "127.0.0.1\tlocalhost glovebox\n::1\tlocalhost ip6-localhost\n";
static const char nsswitch_file[] = "passwd: files\ngroup: files\nhosts: files\n";
/* With egress (kernel-host/net.h): names are asked of its resolver too. */
static const char nsswitch_dns_file[] = "passwd: files\ngroup: files\nhosts: files dns\n";
/* Login shells (E2B's commands run in one) keep the PATH the sandbox gave
 * them, with its tools first; Debian's profile would replace it. */
static const char profile_file[] =
        "if [ \"${PS1-}\" ] && [ \"${BASH-}\" ] && [ \"$BASH\" != /bin/sh ] && "
        "[ -f /etc/bash.bashrc ]; then\n"
        "    . /etc/bash.bashrc\n"
        "fi\n";

/* pip as users of a sandbox expect it: the system's packages are
 * read-only, so it installs into ~/.local (Debian's "externally managed"
 * refusal would only mislead here), a package already installed is
 * "already satisfied" without any network, and with no network it fails at
 * once instead of retrying. */
static const char pip_conf[] = "[global]\n"
                               "break-system-packages = true\n"
                               "retries = 0\n"
                               "timeout = 5\n"
                               "disable-pip-version-check = true\n";

/* The pip command, first on PATH: pip itself, then, when it could not
 * install, the reason it most likely could not. */
static const char pip_wrapper[] =
        "#!/bin/sh\n"
        "# Glovebox: this sandbox has no network.\n"
        "/usr/bin/python3 -m pip \"$@\" && exit 0\n"
        "status=$?\n"
        "for arg in \"$@\"; do\n"
        "    case $arg in\n"
        "    -*) ;;\n"
        "    install | download | wheel | index)\n"
        "        echo \"pip: this sandbox has no network access, so pip can install only what is \\\n"
        "already here (see 'pip list'); a package the operator installs on the host \\\n"
        "(Debian's python3-NAME) is in every sandbox.\" >&2\n"
        "        break ;;\n"
        "    *) break ;;\n"
        "    esac\n"
        "done\n"
        "exit $status\n";

#endif
