I=$1; D=$2; shift 2
ext=()
while read -r id par dev root mp opts rest; do
  fstype=$(echo "$rest" | awk '{for(i=1;i<=NF;i++) if($i=="-"){print $(i+1); exit}}')
  if [ "$fstype" = tmpfs ] && [ "$root" != / ]; then ext+=(--external "mnt[$mp]:m$id"); fi
  case "$fstype" in ext4|devtmpfs) ext+=(--external "mnt[$mp]:m$id");; esac
  if [ "$fstype" = overlay ] && [ "$mp" != / ]; then ext+=(--external "mnt[$mp]:m$id"); fi
done < /proc/$I/mountinfo
rm -rf $D; mkdir -p $D
/opt/criu-test/sbin/criu dump -t $I -D $D -o dump.log -v4 --network-lock nftables --external "mnt[]" "${ext[@]}" "$@"
echo rc=$?
grep -E "Error|Warn" $D/dump.log | grep -v RLIMIT | head -20
