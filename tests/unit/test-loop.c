/* gateway/core/loop.c's watches, on a real libwebsockets context and real
 * pipes: a readable descriptor calls its function, a paused one does not
 * until resumed, a write wanted is called once per asking, a hang-up is
 * heard once more after the watch's descriptor is closed, a watch
 * unwatched by another's function in the same turn is not called (and not
 * freed under the loop: run under the sanitizers), and the owner's
 * descriptor is never closed. The loop is turned until a timerfd, itself
 * watched, fires. How the loop's cost does not grow with the watches is
 * measured by bench/compare.py's "held". */
#include "gateway/core/loop.c"

#include "tests/unit/tap.h"

#include <sys/resource.h>
#include <sys/timerfd.h>

static struct lws_protocols protocols[] = {
    {LOOP_PROTOCOL_NAME, loop_protocol_callback, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static bool spun;
static int clock_fd = -1;
static struct loop_watch *clock_watch;

static void on_clock(void *arg)
{
        uint64_t n;

        (void)arg;
        if (read(clock_fd, &n, sizeof(n)) == (ssize_t)sizeof(n))
                spun = true;
}

/* Turns of the loop for about ms milliseconds: until a timerfd, itself a
 * watch, fires. */
static void spin(long ms)
{
        struct itimerspec at = {.it_value = {ms / 1000, (ms % 1000) * 1000000L}};

        if (clock_fd < 0) {
                clock_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
                if (clock_fd < 0 || loop_watch_fd(clock_fd, on_clock, NULL, &clock_watch) < 0)
                        BAIL_OUT("timerfd");
        }
        spun = false;
        if (timerfd_settime(clock_fd, 0, &at, NULL) < 0)
                BAIL_OUT("timerfd_settime");
        while (!spun)
                lws_service(loop_context(), 0);
}

struct reader {
        int fd;
        int calls, bytes, ends;
        struct loop_watch *watch;
        struct reader *other; /* unwatched by this one's first call */
};

static void on_read(void *arg)
{
        struct reader *r = arg;
        char buf[64];
        ssize_t n;

        r->calls++;
        if (r->other && r->other->watch)
                loop_unwatch(&r->other->watch);
        while ((n = read(r->fd, buf, sizeof(buf))) > 0)
                r->bytes += (int)n;
        if (n == 0) {
                r->ends++;
                loop_unwatch(&r->watch);
        }
}

static void reader_init(struct reader *r, int pair[2])
{
        memset(r, 0, sizeof(*r));
        if (pipe2(pair, O_CLOEXEC | O_NONBLOCK) < 0)
                BAIL_OUT("pipe2");
        r->fd = pair[0];
        if (loop_watch_fd(r->fd, on_read, r, &r->watch) < 0)
                BAIL_OUT("loop_watch_fd");
}

static void test_read_and_pause(void)
{
        struct reader r;
        int p[2];

        reader_init(&r, p);
        spin(20);
        ok(r.calls == 0, "an empty pipe: no call");
        ok(write(p[1], "ab", 2) == 2, "written");
        spin(20);
        ok(r.calls == 1 && r.bytes == 2, "readable: one call, which read it (%d, %d)", r.calls,
           r.bytes);
        loop_pause_read(r.watch, true);
        ok(write(p[1], "cd", 2) == 2, "written while paused");
        spin(20);
        ok(r.calls == 1, "paused: no call");
        loop_pause_read(r.watch, false);
        spin(20);
        ok(r.calls == 2 && r.bytes == 4, "resumed: called, all read (%d, %d)", r.calls, r.bytes);
        loop_unwatch(&r.watch);
        ok(r.watch == NULL, "unwatch nulls the owner's pointer");
        ok(write(p[1], "e", 1) == 1, "written after the unwatch");
        spin(20);
        ok(r.calls == 2, "unwatched: no call");
        ok(fcntl(p[0], F_GETFD) >= 0, "the owner's descriptor is still open");
        close(p[0]);
        close(p[1]);
}

static int writes;

static void on_writable(void *arg)
{
        (void)arg;
        writes++;
}

static void on_never(void *arg)
{
        (void)arg;
}

static void test_want_write(void)
{
        struct loop_watch *w;
        int p[2];

        if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
                BAIL_OUT("pipe2");
        ok(loop_watch_fd_rw(p[1], on_never, on_writable, NULL, &w) == 0, "a read-write watch");
        spin(20);
        ok(writes == 0, "writable, not asked: no call");
        loop_want_write(w);
        spin(20);
        ok(writes == 1, "asked once: one call (%d)", writes);
        spin(20);
        ok(writes == 1, "and no more");
        loop_want_write(w);
        loop_want_write(w);
        spin(20);
        ok(writes == 2, "asked again (twice before a turn): one more call (%d)", writes);
        loop_unwatch(&w);
        close(p[0]);
        close(p[1]);
}

static void test_hang_up(void)
{
        struct reader r;
        int p[2];

        reader_init(&r, p);
        ok(write(p[1], "xyz", 3) == 3, "written");
        close(p[1]);
        spin(20);
        ok(r.bytes == 3 && r.ends == 1, "the data, then the end (%d bytes, %d ends)", r.bytes,
           r.ends);
        ok(r.watch == NULL, "the owner unwatched at the end");
        spin(20);
        ok(r.ends == 1, "nothing after");
        close(p[0]);

        /* Paused, the hang-up is still heard (as lws's poll loop heard it). */
        reader_init(&r, p);
        loop_pause_read(r.watch, true);
        close(p[1]);
        spin(20);
        ok(r.ends == 1 && r.watch == NULL, "paused: the end is heard (%d)", r.ends);
        close(p[0]);
}

static void test_unwatch_in_the_same_turn(void)
{
        struct reader a, b;
        int pa[2], pb[2];

        reader_init(&a, pa);
        reader_init(&b, pb);
        a.other = &b;
        b.other = &a;
        ok(write(pa[1], "a", 1) == 1 && write(pb[1], "b", 1) == 1, "both readable in one turn");
        spin(20);
        ok(a.calls + b.calls == 1,
           "the first called unwatched the other, which was not called "
           "(%d, %d)",
           a.calls, b.calls);
        loop_unwatch(&a.watch);
        loop_unwatch(&b.watch);
        close(pa[0]);
        close(pa[1]);
        close(pb[0]);
        close(pb[1]);
}

static void test_many(void)
{
        enum { N = 2000 };
        static struct reader r[N];
        static int p[N][2];
        int called = 0;

        for (int i = 0; i < N; i++)
                reader_init(&r[i], p[i]);
        for (int i = 0; i < N; i += 100) {
                if (write(p[i][1], "m", 1) != 1)
                        BAIL_OUT("write");
        }
        spin(50);
        for (int i = 0; i < N; i++)
                called += r[i].calls;
        ok(called == N / 100, "%d watches, %d readable: each called once (%d)", N, N / 100, called);
        for (int i = 0; i < N; i++) {
                loop_unwatch(&r[i].watch);
                close(p[i][0]);
                close(p[i][1]);
        }
}

int main(void)
{
        struct lws_context_creation_info info;
        struct lws_context *ctx;
        struct rlimit nofile;

        /* test_many's 2,000 pipes and their duplicates. */
        if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < 8192 &&
            nofile.rlim_max >= 8192) {
                nofile.rlim_cur = 8192;
                setrlimit(RLIMIT_NOFILE, &nofile);
        }
        lws_set_log_level(LLL_ERR, NULL);
        memset(&info, 0, sizeof(info));
        info.port = CONTEXT_PORT_NO_LISTEN;
        info.protocols = protocols;
        info.vhost_name = "default";
        ctx = lws_create_context(&info);
        if (!ctx)
                BAIL_OUT("lws_create_context");
        loop_set_context(ctx);
        test_read_and_pause();
        test_want_write();
        test_hang_up();
        test_unwatch_in_the_same_turn();
        getrlimit(RLIMIT_NOFILE, &nofile);
        if (nofile.rlim_cur >= 8192)
                test_many();
        else
                ok(1, "many watches # SKIP RLIMIT_NOFILE below 8192");
        loop_unwatch(&clock_watch);
        lws_context_destroy(ctx);
        return done_testing();
}
