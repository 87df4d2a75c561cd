#include "autoconf.h"

#include "gateway/ops/procstat.h"
#include "protocol/buf.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STAT_MAX 1024 /* /proc/PID/stat: 52 numbers and a name of 16 bytes */

/* The machine's boot time (seconds since the epoch), read once: a
 * process's start in /proc is in clock ticks after it. 0 when unreadable. */
static double boot_time(void)
{
        static double btime = -1;
        char line[256];
        FILE *f;

        if (btime >= 0)
                return btime;
        btime = 0;
        f = fopen("/proc/stat", "re");
        if (!f)
                return btime;
        /* fgets splits a long line (a machine of many CPUs): a piece that
         * is not a line's start never begins with "btime ". */
        while (fgets(line, sizeof(line), f)) {
                if (strncmp(line, "btime ", 6) == 0) {
                        btime = strtod(line + 6, NULL);
                        break;
                }
        }
        fclose(f);
        return btime;
}

/* Entries of /proc/PID/fd, less "." and ".."; -1 when unreadable. */
static int64_t count_fds(const char *proc)
{
        char path[64];
        struct dirent *e;
        int64_t n = 0;
        DIR *d;

        snprintf(path, sizeof(path), "%s/fd", proc);
        d = opendir(path);
        if (!d)
                return -1;
        while ((e = readdir(d)))
                n += e->d_name[0] != '.';
        closedir(d);
        /* Our own count includes the descriptor opendir used. */
        return strcmp(proc, "/proc/self") == 0 && n > 0 ? n - 1 : n;
}

/* The soft "Max open files" of /proc/PID/limits; -1 when unreadable or
 * unlimited. */
static int64_t max_fds(const char *proc)
{
        char path[64], text[4096];
        const char *line;
        char *end;
        long long v;

        snprintf(path, sizeof(path), "%s/limits", proc);
        if (read_small_file(path, text, sizeof(text)) < 0)
                return -1;
        line = strstr(text, "Max open files");
        if (!line)
                return -1;
        line += strlen("Max open files");
        v = strtoll(line, &end, 10);
        return end == line ? -1 : (int64_t)v;
}

int procstat_read(int pid, struct procstat *out)
{
        char proc[32], path[64], text[STAT_MAX];
        unsigned long long field[22];
        long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
        const char *p;
        char *end;

        memset(out, 0, sizeof(*out));
        if (pid > 0)
                snprintf(proc, sizeof(proc), "/proc/%d", pid);
        else
                snprintf(proc, sizeof(proc), "/proc/self");
        snprintf(path, sizeof(path), "%s/stat", proc);
        if (read_small_file(path, text, sizeof(text)) < 0)
                return -ENOENT;
        /* The name, in parentheses, may hold anything: the fields start
         * after its last ')'. Field 3 (the state) is a letter. */
        p = strrchr(text, ')');
        if (!p || !p[1] || !p[2] || ticks <= 0 || page <= 0)
                return -EINVAL;
        p += 3;
        for (size_t i = 0; i < sizeof(field) / sizeof(field[0]); i++) {
                field[i] = strtoull(p, &end, 10);
                if (end == p)
                        return -EINVAL;
                p = end;
        }
        /* field[i] is /proc's field i + 4: utime 14, stime 15, starttime
         * 22, vsize 23, rss 24 (pages). */
        out->cpu_seconds = (double)(field[10] + field[11]) / (double)ticks;
        out->start_time = boot_time() + (double)field[18] / (double)ticks;
        out->vsize_bytes = field[19];
        out->rss_bytes = field[20] * (uint64_t)page;
        out->open_fds = count_fds(proc);
        out->max_fds = max_fds(proc);
        return 0;
}
