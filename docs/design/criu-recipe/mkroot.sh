# mkroot.sh SAVED T ROOTUID USERUID: rebuild a sandbox's tmpfs top at T (host mount ns), print --external args
S=$1; T=$2; RU=$3; UU=$4
mkdir -p $T && mount -t tmpfs -o mode=0755,size=1024m,uid=$RU,gid=$RU tmpfs $T || exit 1
cd $T && mkdir base upper work usr-upper usr-work root usr tmp home
chown $RU:$RU upper work usr-upper usr-work root usr
tar -C base --numeric-owner -xpf $S/root.tar
find base -uid 0 -exec chown -h $RU {} + ; find base -gid 0 -exec chgrp -h $RU {} + ; find base -uid 1000 -exec chown -h $UU {} + ; find base -gid 1000 -exec chgrp -h $UU {} +
rm -rf base/run/mount
tar -C tmp --numeric-owner -xpf $S/tmp.tar; tar -C home --numeric-owner -xpf $S/home.tar
read o1 m1 < <(sed -n 1p $S/modes); read o2 m2 < <(sed -n 2p $S/modes)
chown $o1 tmp; chmod $m1 tmp; chown $o2 home; chmod $m2 home
cp $S/boot_id boot_id; chown $RU:$RU boot_id
# the host's /usr idmapped through a user namespace with the sandbox's maps (as the kernel-host's overlay_lower_open)
unshare --user sleep 30 & H=$!; sleep 0.1
printf '0 %s 1\n1000 %s 1\n' $RU $UU > map.tmp; cat map.tmp > /proc/$H/uid_map; cat map.tmp > /proc/$H/gid_map; rm map.tmp
mkdir usr-lower; python3 /tmp/crx/idmount.py /usr $T/usr-lower /proc/$H/ns/user || exit 1
kill $H
# layers named relative to the top (cwd), as the kernel-host does: the sandbox's mountinfo shows no host path
mount -t overlay overlay -o lowerdir=base,upperdir=upper,workdir=work,userxattr,nosuid,nodev $T/root || exit 1
mount -t overlay overlay -o lowerdir=usr-lower,upperdir=usr-upper,workdir=usr-work,userxattr,nosuid,nodev $T/usr || exit 1
