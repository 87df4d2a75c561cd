/* Pausing an E2B sandbox with its memory: its box, every context's kernel
 * and the processes they started are checkpointed whole (the kernel-host's
 * checkpoint.h, over kernels.h's kernels_checkpoint) and restored under
 * the same ids: the contexts keep their ids, the kernels their ids, keys
 * and variables, the sandbox its files, /tmp and boot id. Commands started
 * through envd run on: their pipes to the gateway are replaced at the
 * restore by new ones the kernel-host hands over, under the same pids; a
 * command on a terminal gets a new terminal, its master handed over the
 * same way. */
#include "autoconf.h"

#include "gateway/e2b/contexts.h"
#include "gateway/e2b/e2b.h"
#include "gateway/e2b/e2b_internal.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/pause.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void e2b_memory_drop(struct e2b_sandbox *s)
{
        s->checkpoint[0] = '\0';
        json_decref(s->memory_contexts);
        s->memory_contexts = NULL;
        json_decref(s->memory_commands);
        s->memory_commands = NULL;
}

static void set_notice(struct e2b_sandbox *s, const char *why)
{
        snprintf(s->pause_notice, sizeof(s->pause_notice), "%s: %s", PAUSE_MEMORY_NOTICE, why);
}

/* ctx of a checkpoint: the sandbox's id, looked up again at its end. */
static void on_checkpointed(void *ctx, int status, const char *message, uint64_t bytes)
{
        struct e2b_sandbox *s = e2b_find_any(ctx);

        free(ctx);
        if (!s || s->phase != E2B_PAUSING) {
                /* Removed meanwhile (its kill deleted the checkpoint). */
                return;
        }
        if ((status == -EOPNOTSUPP || status == -EFBIG) && s->box && !s->box->network.enabled) {
                /* One the kernel-host cannot take (a template's, a
                 * zygote's kernel...), or one past its room: its files,
                 * saying why. */
                e2b_memory_drop(s);
                set_notice(s, message && message[0] ? message : "no checkpoint could be made");
                status = e2b_pause_files(s);
                if (status == 0)
                        return;
        }
        /* Its commands come back with new pipes. */
        if (status == 0) {
                envd_commands_suspend(s);
                s->checkpoint_bytes = bytes;
        }
        e2b_pause_saved(s, status, message, 0);
}

int e2b_memory_pause(struct e2b_sandbox *s)
{
        const char *why = !s->box ? "the sandbox has no box" : kernels_checkpoint_refusal(s->box);
        char *id;
        int rc;

        if (why) {
                set_notice(s, why);
                return -EOPNOTSUPP;
        }
        s->memory_contexts = e2b_contexts_record(s);
        s->memory_commands = envd_commands_record(s);
        id = strdup(s->id);
        if (!s->memory_contexts || !s->memory_commands || !id || jp_uuid4(s->checkpoint) < 0) {
                rc = -ENOMEM;
                goto fail;
        }
        rc = kernels_checkpoint(s->box, s->owner, s->id, s->checkpoint, true, on_checkpointed, id);
        if (rc == 0)
                return 0;
fail:
        free(id);
        e2b_memory_drop(s);
        set_notice(s, kernels_checkpoint_why(rc));
        return rc;
}

/* ---- resume --------------------------------------------------------------------- */

static void on_first_ready(struct waiter *w, void *subject, int status, const char *message)
{
        struct e2b_sandbox *s = lws_container_of(w, struct e2b_sandbox, resume_waiter);

        (void)subject;
        if (status) {
                e2b_resume_failed(s, message ? message : "its kernel did not come back");
                return;
        }
        /* Its sudo service was restored with it, listening. */
        if (strcmp(config_get()->sandbox, "none") != 0)
                s->sudo = E2B_SUDO_READY;
        e2b_resumed(s);
}

/* What of E2B's own variables a copy (a fork's, a snapshot's) does not
 * share with its source: its id, unless its envVars set it otherwise. A
 * new reference, or NULL when out of memory. */
static json_t *copy_variables(const struct e2b_sandbox *s)
{
        json_t *all = e2b_env(s);
        json_t *own =
            all ? json_pack("{s:O}", "E2B_SANDBOX_ID", json_object_get(all, "E2B_SANDBOX_ID"))
                : NULL;

        json_decref(all);
        return own;
}

/* env ("NAME=value" strings) with own's names set to own's values: a new
 * reference, or NULL. */
static json_t *env_with(json_t *env, json_t *own)
{
        json_t *out = json_array(), *item, *value;
        const char *name;
        size_t i;

        json_array_foreach(env, i, item) {
                const char *entry = json_string_value(item);
                size_t len = entry ? strcspn(entry, "=") : 0;
                char key[256];

                snprintf(key, sizeof(key), "%.*s", (int)len, entry ? entry : "");
                if (out && entry && (len >= sizeof(key) || !json_object_get(own, key)) &&
                    json_array_append(out, item) < 0) {
                        json_decref(out);
                        out = NULL;
                }
        }
        json_object_foreach(own, name, value) {
                char *entry = NULL;

                if (out && (asprintf(&entry, "%s=%s", name, json_string_value(value)) < 0 ||
                            json_array_append_new(out, json_string(entry)) < 0)) {
                        json_decref(out);
                        out = NULL;
                }
                free(entry);
        }
        return out;
}

/* The kernel a context's record names, taken over in s's restored box. */
static struct kernel *adopt(struct e2b_sandbox *s, json_t *rec, char ***env_out)
{
        const char *id = json_string_value(json_object_get(rec, "id"));
        const char *spec = json_string_value(json_object_get(rec, "kernelspec"));
        const char *key = json_string_value(json_object_get(rec, "key"));
        const char *ipc = json_string_value(json_object_get(rec, "ipc"));
        json_t *own = s->fork_copy ? copy_variables(s) : NULL;
        json_t *env = json_object_get(rec, "env");
        struct kernel *k = NULL;
        char derived[JP_UUID_SIZE];
        int rc;

        *env_out = NULL;
        /* A fork's copy: its kernel has the id the kernel-host derived. */
        if (id && s->fork_copy) {
                jp_uuid_derive(s->box->id, id, derived);
                id = derived;
        }
        env = !json_is_array(env) ? NULL : own ? env_with(env, own) : json_incref(env);
        rc = !id || !spec || !key || !ipc || !env || (s->fork_copy && !own)
                 ? -EINVAL
                 : jp_strv_from_json(env, env_out);
        json_decref(env);
        if (rc < 0) {
                json_decref(own);
                return NULL;
        }
        {
                const struct kernel_kept kept = {.id = id,
                                                 .kernelspec = spec,
                                                 .owner = s->owner,
                                                 .key = key,
                                                 .env = *env_out,
                                                 .pid = 0,
                                                 .ipc = ipc,
                                                 .shared = true};

                if (kernel_adopt(&kept, s->box, &k) < 0) {
                        json_decref(own);
                        return NULL;
                }
        }
        /* Its own key, seeds and id, not its siblings'. */
        if (s->fork_copy) {
                rc = kernel_rekey(k, own);
                if (rc < 0 && rc != -EOPNOTSUPP)
                        klog_warn(k->id, "the fork keeps its source's key: %s", strerror(-rc));
        }
        json_decref(own);
        return k;
}

static void on_box_restored(struct sandbox_waiter *sw, struct sandbox *sb, const char *error)
{
        struct e2b_sandbox *s = lws_container_of(sw, struct e2b_sandbox, restore_wait);
        struct kernel *first = NULL;
        size_t i;
        json_t *c;

        if (error) {
                e2b_resume_failed(s, error);
                return;
        }
        /* A copy's volumes are its source's: the kernel-host mounted them. */
        if (!s->volumes && sb->volumes && jp_strv_dup(sb->volumes, &s->volumes) < 0)
                log_warn("e2b sandbox %s: its volumes cannot be listed (out of memory)", s->id);
        /* Every command still running had its pipes handed over before. */
        envd_commands_settle(s);
        json_array_foreach(s->memory_contexts, i, c) {
                json_t *rec = json_object_get(c, "kernel");
                const char *cid = json_string_value(json_object_get(c, "id")) ?: "";
                const char *lang = json_string_value(json_object_get(c, "language")) ?: "";
                const char *cwd = json_string_value(json_object_get(c, "cwd")) ?: "";
                struct kernel *k = NULL;
                char **env = NULL;

                if (rec) {
                        k = adopt(s, rec, &env);
                        jp_strv_free(env);
                        if (!k) {
                                e2b_resume_failed(s, "a restored kernel cannot be taken over");
                                return;
                        }
                }
                if (!e2b_context_restore(s, cid, lang, cwd, k)) {
                        if (k)
                                kernel_shutdown(k, NULL);
                        e2b_resume_failed(s, "out of memory");
                        return;
                }
                if (k && !first)
                        first = k;
        }
        if (!first) {
                e2b_resume_failed(s, "the checkpoint holds no kernel");
                return;
        }
        s->resume_waiter.done = on_first_ready;
        kernel_when_ready(first, &s->resume_waiter);
}

int e2b_memory_resume(struct e2b_sandbox *s)
{
        int rc = sandbox_new_restored(&s->limits, s->checkpoint, s->fork_copy, &s->box);

        if (rc < 0)
                return rc;
        /* Listening for their pipes before the kernel-host can hand them:
         * it does at the restore's end, a later turn of the loop. */
        envd_commands_restore(s, s->memory_commands, s->fork_copy ? s->box->id : NULL);
        s->restore_wait.ready = on_box_restored;
        sandbox_when_ready(s->box, &s->restore_wait);
        return 0;
}
