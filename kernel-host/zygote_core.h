/* A kernel's start held on one core: zygote_kernel.py's StartCore, in C.
 *
 * A copy-on-write fault of a process that has a thread running on another
 * core flushes that core's TLB by an interprocessor interrupt (13.9 µs a
 * fault against 2.2 without, in a virtual machine: bench/cow_fault). So
 * while the machine has no more to run than it has cores, a kernel's
 * threads stay on the core its start began on until its first request
 * that could run code; StartCore.release lets them go. Include after
 * Python.h. */
#ifndef GLOVEBOX_KERNEL_HOST_ZYGOTE_CORE_H
#define GLOVEBOX_KERNEL_HOST_ZYGOTE_CORE_H

/* _glovebox_zygote.hold_core(): while the machine runs no more than it
 * has cores (/proc/loadavg's count of running tasks), every thread of this
 * process kept on the core the caller runs on (threads made before, such
 * as libzmq's in a process forked ahead, too); the cores it was allowed
 * before as a set, or None where it was not held. */
PyObject *zygote_hold_core(PyObject *self, PyObject *unused);

#endif
