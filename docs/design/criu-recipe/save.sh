# save.sh INIT DIR: the sandbox's files that live on its (unreachable) tmpfs top, as tars
INIT=$1; D=$2; mkdir -p $D
cat /proc/$INIT/mountinfo > $D/mountinfo
nsenter -t $INIT -U -m -- unshare -m --propagation private sh -c 'mount -n --bind / /root && tar -C /root --numeric-owner --xattrs -cf - .' > $D/root.tar
tar -C /proc/$INIT/root/tmp --numeric-owner --xattrs -cf $D/tmp.tar .
tar -C /proc/$INIT/root/home/user --numeric-owner --xattrs -cf $D/home.tar .
cat /proc/$INIT/root/proc/sys/kernel/random/boot_id > $D/boot_id
stat -c '%u:%g %a' /proc/$INIT/root/tmp /proc/$INIT/root/home/user > $D/modes
ls -l $D
