# idmount.py SRC DST USERNS_FILE: clone the mount at SRC, idmap it through USERNS_FILE's user namespace, attach at DST
import ctypes, os, sys, struct
libc = ctypes.CDLL(None, use_errno=True)
SYS_open_tree, SYS_move_mount, SYS_mount_setattr = 428, 429, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_EMPTY_PATH, AT_RECURSIVE = 1, 0o2000000, 0x1000, 0x8000
MOUNT_ATTR_IDMAP, MOUNT_ATTR_RDONLY, MOVE_MOUNT_F_EMPTY_PATH = 0x100000, 1, 4
src, dst, uns = sys.argv[1:4]
def chk(r, what):
    if r < 0: e = ctypes.get_errno(); sys.exit(f'{what}: {os.strerror(e)}')
    return r
fd = chk(libc.syscall(SYS_open_tree, -100, src.encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC), 'open_tree')
ufd = os.open(uns, os.O_RDONLY)
attr = struct.pack('QQQQ', MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY, 0, 0, ufd)
chk(libc.syscall(SYS_mount_setattr, fd, b'', AT_EMPTY_PATH, attr, len(attr)), 'mount_setattr')
chk(libc.syscall(SYS_move_mount, fd, b'', -100, dst.encode(), MOVE_MOUNT_F_EMPTY_PATH), 'move_mount')
