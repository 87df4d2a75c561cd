# parent.py PIDFILE PIPE_INODE CRIU-ARGS...: stands in for the kernel-host: runs `criu restore -d --restore-sibling`
# so that the restored init becomes OUR child, hands it a new report pipe on fd 3 (--inherit-fd), then reads
# the reports and reaps, until init ends (or SIGTERM).
import os, sys, subprocess, time, struct, signal
pidfile, ino = sys.argv[1], sys.argv[2]; args = sys.argv[3:]
r, w = os.pipe()
os.set_inheritable(w, True)
t = time.time()
cmd = args + ['--restore-sibling', '-d', '--pidfile', pidfile, '--inherit-fd', f'fd[{w}]:pipe:[{ino}]']
rc = subprocess.run(cmd, pass_fds=(w,)).returncode
print(f'criu restore rc={rc} in {time.time()-t:.3f}s', flush=True)
os.close(w)
if rc: sys.exit(1)
init = int(open(pidfile).read())
print('init', init, 'ppid', open(f'/proc/{init}/stat').read().split()[3], 'me', os.getpid(), flush=True)
os.set_blocking(r, False)
while True:
    try:
        d = os.read(r, 4096)
        if d: print('report bytes', d.hex(), flush=True)
    except BlockingIOError: pass
    pid, st = os.waitpid(-1, os.WNOHANG)
    if pid:
        print('reaped', pid, 'status', st, flush=True); break
    time.sleep(0.2)
