/* gateway/kernels/pause.c's state directory: ids that cannot leave paused/, records
 * written whole and read back (each time, from the directory's start), a
 * record that is not one left alone, and a removal that takes all. The tar
 * runs need a sandbox: tests/integration/test_pause.py and
 * tests/e2b/test_pause_sdk.py drive them. Included to reach id_ok; the
 * event loop and the processes are never reached here, and are only
 * declared for the linker. */
#include "gateway/kernels/pause.c"

#include "tests/unit/tap.h"
#include "tests/unit/tmpdir.h"

#include <sys/stat.h>

int process_start(struct hostmsg_start *start, bool keep_stdin, const struct process_ops *ops,
                  void *ctx, struct process **out)
{
        (void)start, (void)keep_stdin, (void)ops, (void)ctx, (void)out;
        BAIL_OUT("process_start reached");
}
int process_stdin_fd(const struct process *p)
{
        (void)p;
        BAIL_OUT("process_stdin_fd reached");
}
void process_close_stdin(struct process *p)
{
        (void)p;
        BAIL_OUT("process_close_stdin reached");
}
void loop_timer_start(lws_sorted_usec_list_t *timer, sul_cb_t fn, double delay_ms)
{
        (void)timer, (void)fn, (void)delay_ms;
        BAIL_OUT("loop_timer_start reached");
}
void loop_timer_stop(lws_sorted_usec_list_t *timer)
{
        (void)timer;
}
void process_signal(struct process *p, int sig)
{
        (void)p, (void)sig;
        BAIL_OUT("process_signal reached");
}
const struct config *config_get(void)
{
        BAIL_OUT("config_get reached");
}

struct seen {
        int count;
        char ids[4][PAUSE_ID_MAX];
        char owner[64];
};

static void on_found(void *ctx, const char *id, json_t *meta)
{
        struct seen *s = ctx;

        if (s->count < 4)
                snprintf(s->ids[s->count], sizeof(s->ids[0]), "%s", id);
        snprintf(s->owner, sizeof(s->owner), "%s",
                 json_string_value(json_object_get(meta, "owner")) ?: "");
        s->count++;
}

static bool exists_at(const char *dir, const char *rel)
{
        char path[PATH_MAX];
        struct stat st;

        snprintf(path, sizeof(path), "%s/%s", dir, rel);
        return lstat(path, &st) == 0;
}

int main(void)
{
        char dir[] = "/tmp/glovebox-test-pause-XXXXXX";
        char state[PATH_MAX], path[PATH_MAX];
        struct seen seen = {0};
        struct stat st;
        json_t *meta;
        FILE *f;

        log_threshold =
            (enum log_level)(LOG_LEVEL_ERROR + 1); /* quiet: the warnings are expected */
        if (!mkdtemp(dir))
                BAIL_OUT("mkdtemp");
        snprintf(state, sizeof(state), "%s/state", dir);

        ok(!pause_enabled(), "off before pause_init");
        is_int(pause_init(""), 0, "\"\": stays off");
        ok(!pause_enabled(), "still off");
        is_int(pause_write_meta("gb1", json_object()), -ENOTSUP, "no record without a state dir");
        is_int(pause_init(state), 0, "pause_init makes the directory");
        ok(pause_enabled(), "on");
        snprintf(path, sizeof(path), "%s/paused", state);
        is_int(stat(path, &st), 0, "paused/ exists");
        is_int(st.st_mode & 07777, 0700, "paused/ is the gateway's alone");

        /* Ids never name anything outside paused/<id>/. */
        ok(id_ok("gb0123456789abcdef"), "an E2B id");
        ok(id_ok("2ac60e29-8fd8-42b7-9f55-006a03bb24fb"), "a kernel id");
        ok(!id_ok(""), "empty");
        ok(!id_ok(".."), "..");
        ok(!id_ok("../x"), "../x");
        ok(!id_ok("a/b"), "a/b");
        ok(!id_ok("a b"), "a space");
        ok(!id_ok("0123456789012345678901234567890123456789012345678901234567890123"),
           "%d characters", PAUSE_ID_MAX);
        is_int(pause_write_meta("../escape", json_object()), -EINVAL, "a bad id is refused");
        ok(!exists_at(state, "escape"), "and nothing is written outside");

        meta = json_pack("{s:s, s:s}", "kind", "e2b", "owner", "alice");
        is_int(pause_write_meta("gbaaaa", meta), 0, "a record is written");
        is_int(pause_write_meta("gbaaaa", meta), 0, "and written again over itself");
        json_decref(meta);
        ok(exists_at(state, "paused/gbaaaa/meta.json"), "meta.json");
        ok(!exists_at(state, "paused/gbaaaa/meta.json.new"), "no .new left behind");

        /* Not records: a directory without one, an unreadable one, a
         * symlink, a name that is not an id. */
        snprintf(path, sizeof(path), "%s/paused/gbempty", state);
        mkdir(path, 0700);
        snprintf(path, sizeof(path), "%s/paused/gbbad", state);
        mkdir(path, 0700);
        snprintf(path, sizeof(path), "%s/paused/gbbad/meta.json", state);
        f = fopen(path, "w");
        if (!f)
                BAIL_OUT("fopen %s", path);
        fputs("{not json", f);
        fclose(f);
        snprintf(path, sizeof(path), "%s/paused/gblink", state);
        if (symlink("gbaaaa", path) < 0)
                BAIL_OUT("symlink");
        snprintf(path, sizeof(path), "%s/paused/not.an.id", state);
        mkdir(path, 0700);

        is_int(pause_load_all(on_found, &seen), 1, "one record found");
        is_str(seen.ids[0], "gbaaaa", "its id");
        is_str(seen.owner, "alice", "its owner, as written");
        memset(&seen, 0, sizeof(seen));
        is_int(pause_load_all(on_found, &seen), 1,
               "found again by a second reader (e2b/lifecycle.c, then "
               "jupyter/pause_api.c)");

        pause_forget("gbaaaa");
        ok(!exists_at(state, "paused/gbaaaa"), "pause_forget removes the directory");
        pause_forget("../..");
        ok(exists_at(dir, "state"), "pause_forget of a bad id touches nothing");
        memset(&seen, 0, sizeof(seen));
        is_int(pause_load_all(on_found, &seen), 0, "nothing left to find");

        tmpdir_remove(dir);
        return done_testing();
}
