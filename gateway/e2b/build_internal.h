/* What the parts of template builds share (builds.h): the store and API
 * (builds.c), the runner of a build's steps (build_run.c) and the uploads
 * of files to copy (build_uploads.c). */
#ifndef GLOVEBOX_BUILD_INTERNAL_H
#define GLOVEBOX_BUILD_INTERNAL_H

#include "gateway/e2b/builds.h"
#include "gateway/core/keys.h"
#include "protocol/ids.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#define BUILD_TEMPLATE_ID_SIZE 21 /* 20 of a-z 0-9, as E2B's */
#define BUILD_ALIAS_MAX        128
#define BUILD_MAX_LOG_ENTRIES  10000 /* a build's log; past it, one line says so */
#define BUILD_MAX_LOG_LINE     4096  /* bytes of one log entry's message */
#define BUILD_MAX_STEPS        256
/* Bytes of one step's argument, of the start and ready commands, and of
 * one ENV entry: each travels to the kernel-host as one string. */
#define BUILD_MAX_ARG          (HOSTMSG_MAX_STRING - 64)
#define BUILD_MAX_ENV          200 /* ENV entries (the kernel-host takes 256 in all) */
#define BUILD_LOG_PAGE         100   /* entries one status call returns, as E2B */
#define BUILD_MAX_TEMPLATES    4096  /* all tenants' */
#define BUILD_MAX_TAGS         64    /* per template */
#define BUILD_DEFAULT_TAG      "default"
#define BUILD_BASE_IMAGE       "e2bdev/base" /* the SDK's default image: the host's */

enum build_status { BUILD_WAITING, BUILD_BUILDING, BUILD_READY, BUILD_ERROR };

struct build_tpl;
struct build_run;

struct build {
        struct build *next; /* in its template's list, newest first */
        struct build_tpl *tpl;
        char id[JP_UUID_SIZE]; /* also its layer's id */
        enum build_status status;
        char created_at[JP_TIMESTAMP_SIZE];
        json_t *tags;   /* the tags it gets when ready */
        json_t *logs;   /* [{timestamp, level, message}] */
        json_t *reason; /* {message, step?} once failed */
        int64_t cpu_count, memory_mb;
        /* What its sandboxes get, once ready. */
        char base[JP_KERNELSPEC_NAME_SIZE]; /* an operator's template; "" for the host's */
        json_t *layers;                     /* ids, top first: its own, then its parent's */
        json_t *env;
        char workdir[PATH_MAX];
        bool root; /* its user is root */
        char *start_cmd, *ready_cmd;
        struct build_run *run; /* while it runs */
        bool waiting_seal;     /* its sandbox is ending: ready once its layer is sealed */
};

struct build_tpl {
        struct build_tpl *next;
        char id[BUILD_TEMPLATE_ID_SIZE];
        char alias[BUILD_ALIAS_MAX];
        char owner[KEYS_NAME_MAX];
        json_t *tags; /* {tag: {"build": id, "at": timestamp}} */
        struct build *builds;
};

/* The configuration builds run by. */
const struct config *build_config(void);
/* Why builds are off, or NULL when they are on. */
const char *build_disabled(void);

/* The store (builds.c). Templates are found for the caller (tenants.h):
 * by id, or by alias (an admin's own first). */
struct build_tpl *build_templates(void);
size_t build_tpl_count(void);
void build_tpl_add(struct build_tpl *t);
/* Takes t off the list (the caller frees it with build_tpl_free). */
void build_tpl_remove(struct build_tpl *t);
void build_tpl_free(struct build_tpl *t);
struct build_tpl *build_tpl_by_id(const char *id);
struct build_tpl *build_tpl_by_alias(const char *alias);
struct build *build_by_id(struct build_tpl *t, const char *id);
/* The ready build tag names in t ("": the tag "default", else the newest
 * ready build), or NULL. */
struct build *build_by_tag(struct build_tpl *t, const char *tag);
/* A new build of t (waiting), first in its list; NULL without memory. */
struct build *build_new(struct build_tpl *t);
/* Whether a ready build of a template other than skip stacks layer id. */
bool build_layer_in_use(const char *id, const struct build_tpl *skip);
/* Records the ready builds in the state directory. 0 or -errno (logged). */
int build_save(void);
/* What owner's templates take on disk, and how many it has. */
uint64_t build_owner_bytes(const char *owner);
size_t build_owner_templates(const char *owner);
/* "[namespace/]alias[:tag]" as E2B reads it (lowercased): the alias and
 * the tag ("" for none and for "default"). 0 or -EINVAL with err. */
int build_parse_name(const char *in, char alias[BUILD_ALIAS_MAX], char tag[BUILD_ALIAS_MAX],
                     char *err, size_t errlen);
/* A tag of a tags list, lowercased into out: 0 or -EINVAL with err. */
int build_check_tag(const char *in, char out[BUILD_ALIAS_MAX], char *err, size_t errlen);
/* A template name of the gateway's own (base, code-interpreter-v1, an
 * operator's template, a kernelspec). */
bool build_builtin_name(const char *name);
/* Appends a log entry to b (level "info", "warn", "error", "debug"). */
void build_log(struct build *b, const char *level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* b failed (at step: "base", a number, "finalize"): error, with reason. */
void build_fail(struct build *b, const char *step, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* b's sandbox ended after its steps passed: ready once its layer is
 * sealed (builds_layer_sealed). */
void build_finished(struct build *b);
/* The kernel-host sealed (error 0) a build's layer, or could not. */
void builds_layer_sealed(const char *layer_id, int error);

/* Runs b's steps (spec: E2B's TemplateBuildStartV2), starting now. 0, or
 * -errno with err saying why (nothing started). */
int build_run_start(struct build *b, json_t *spec, char *err, size_t errlen);
/* Stops a running build (its template is deleted, the gateway stops). */
void build_run_abort(struct build *b);
/* Builds running now for owner. */
unsigned build_runs_of(const char *owner);

/* Uploads (build_uploads.c): the signed URL of owner's upload hash, for
 * the request r came in on. A new string (the caller's) or NULL. */
char *build_upload_url(struct http_request *r, const char *owner, const char *hash);
/* Whether owner uploaded hash (a file to copy is there). */
bool build_upload_present(const char *owner, const char *hash);
/* Opens owner's upload hash for reading: a descriptor, or -errno. */
int build_upload_open(const char *owner, const char *hash);
/* Whether hash has the form of the SDK's files hash (64 hex digits). */
bool build_hash_valid(const char *hash);
int build_uploads_init(const char *state_dir);

#endif
