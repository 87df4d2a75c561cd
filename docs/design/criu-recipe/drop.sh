# drop.sh GW K: stop the gateway GW, then have kernel K shut down the connections it accepted from outside
GW=$1; K=$2
kill -STOP $GW
fds=$(ss -xp | grep -o "pid=$K,fd=[0-9]*" | cut -d= -f3)
echo "kernel fds from outside: $fds"
args=(); for f in $fds; do args+=(-ex "call (int)shutdown($f, 2)"); done
gdb -p $K -batch "${args[@]}" 2>&1 | grep '^\$' | tr '\n' ' '; echo
for i in $(seq 100); do [ -z "$(ss -xp | grep "pid=$K,")" ] && break; sleep 0.02; done
echo "kernel's outside sockets left: $(ss -xp | grep -c "pid=$K,")"
