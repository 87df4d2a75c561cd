# extargs.sh MOUNTINFO T: the --external mnt[KEY]:PATH for restore, keys as dump.sh made them
MI=$1; T=$2
while read -r id par dev root mp opts rest; do
  fstype=$(echo "$rest" | awk '{for(i=1;i<=NF;i++) if($i=="-"){print $(i+1); exit}}')
  p=
  case "$fstype" in
    tmpfs) [ "$root" != / ] && p=$T$root ;;
    ext4) p=$root ;;
    devtmpfs) p=/dev$root ;;
    overlay) [ "$mp" != / ] && p=$T$mp ;;
  esac
  [ -n "$p" ] && echo "--external mnt[m$id]:$p"
done < $MI
