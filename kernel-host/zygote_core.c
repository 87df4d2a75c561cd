/* A kernel's start held on one core (zygote_core.h). */
#include "autoconf.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kernel-host/zygote_core.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Sets every thread's affinity to set (the calling thread's first): 0, or
 * -1 with errno when the calling thread's could not be set. A thread that
 * ended meanwhile is no failure. */
static int set_threads_affinity(const cpu_set_t *set)
{
        DIR *d;
        struct dirent *e;

        if (sched_setaffinity(0, sizeof(*set), set) < 0)
                return -1;
        d = opendir("/proc/self/task");
        if (!d)
                return 0;
        while ((e = readdir(d))) {
                char *end;
                long tid = strtol(e->d_name, &end, 10);

                if (*end == '\0' && tid > 0 && tid != (long)gettid())
                        (void)sched_setaffinity((pid_t)tid, sizeof(*set), set);
        }
        closedir(d);
        return 0;
}

PyObject *zygote_hold_core(PyObject *self, PyObject *unused)
{
        char buf[128];
        int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC), cpu;
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        long running, cores = sysconf(_SC_NPROCESSORS_ONLN);
        cpu_set_t saved, one;
        PyObject *set;

        if (fd >= 0)
                close(fd);
        if (n <= 0)
                Py_RETURN_NONE;
        buf[n] = '\0';
        /* "0.52 0.58 0.59 3/211 4242": the fourth field's first number. */
        if (sscanf(buf, "%*s %*s %*s %ld/", &running) != 1 || running > (cores > 0 ? cores : 1))
                Py_RETURN_NONE;
        cpu = sched_getcpu();
        if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(saved), &saved) < 0 ||
            !CPU_ISSET(cpu, &saved) || CPU_COUNT(&saved) < 2)
                Py_RETURN_NONE;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        /* Threads made before (libzmq's, made while a process forked
         * ahead waited) are held too. */
        if (set_threads_affinity(&one) < 0)
                Py_RETURN_NONE;
        set = PySet_New(NULL);
        for (int i = 0; set && i < CPU_SETSIZE; i++) {
                PyObject *core;

                if (!CPU_ISSET(i, &saved))
                        continue;
                core = PyLong_FromLong(i);
                if (!core || PySet_Add(set, core) < 0)
                        Py_CLEAR(set);
                Py_XDECREF(core);
        }
        if (!set)
                (void)set_threads_affinity(&saved);
        return set;
}
