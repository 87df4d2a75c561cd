/* What the parts of template builds share (builds.h): the store and API
 * (builds.c), the runner of a build's steps (build_run.c) and the uploads
 * of files to copy (build_uploads.c). */
#ifndef GLOVEBOX_BUILD_INTERNAL_H
#define GLOVEBOX_BUILD_INTERNAL_H

#include "gateway/builds.h"
#include "gateway/keys.h"
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
#define BUILD_MAX_ARG          (64 * 1024) /* bytes of one step's argument */
#define BUILD_LOG_PAGE         100   /* entries one status call returns, as E2B */

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
