# cgclean.sh NAME: remove the cgroup trees NAME that restores made (deepest first)
N=$1; MEMR=$(grep memory: /proc/self/cgroup | cut -d: -f3)
for c in /sys/fs/cgroup/*/; do
  for base in "$c$N" "$c${MEMR#/}/$N"; do
    [ -d "$base" ] && find "$base" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
done
