/* One cell run for an HTTP client (E2B's /execute and Glovebox's own
 * /api/kernels/{id}/execute): the code goes to the kernel through a
 * private client session, and the outputs stream back as newline-delimited
 * JSON in E2B's line format while the cell runs:
 *   {"type":"number_of_executions","execution_count":N}
 *   {"type":"stdout"|"stderr","text":...,"timestamp":...}
 *   {"type":"result", <format>: ..., "is_main_result": bool}
 *   {"type":"error","name":...,"value":...,"traceback":...}
 *   {"type":"keepalive"} after 5 s of silence
 *   {"type": "end_of_execution"}
 * At the timeout the kernel is interrupted, then restarted if it does not
 * stop; the stream keeps what was sent and ends with a TimeoutError line. A
 * client that goes away interrupts its cell. */
#ifndef GLOVEBOX_EXECUTE_H
#define GLOVEBOX_EXECUTE_H

#include "gateway/core/http.h"
#include "gateway/kernels/kernels.h"

#include <jansson.h>

/* What the stream does when the kernel is shut down mid-cell. */
enum execute_gone {
        /* an ExecutionAborted error line, then end_of_execution: Glovebox's
         * own /api/kernels/{id}/execute */
        EXECUTE_GONE_LINE,
        /* cut short, without the body's end (http_stream_abort), as the
         * connection to a killed E2B sandbox is: E2B's /execute, whose SDKs
         * then find the sandbox gone and raise their "sandbox was killed"
         * error (a context deleted mid-cell cuts its cell the same way) */
        EXECUTE_GONE_CUT,
};

/* Runs code in k and streams to r (answering r, now or later). env (may
 * be NULL) is set in the kernel for this run only, in its language
 * (gateway/kernels/run_env.h; the caller checks that it can be). timeout_s of 0
 * means none. */
void execute_start(struct http_request *r, struct kernel *k, const char *code, json_t *env,
                   double timeout_s, enum execute_gone gone);

/* The same run for a consumer inside the gateway (MCP's run_code) instead
 * of an HTTP stream: every line above goes to line() as a JSON object
 * (taken over), none ever dropped, and end() runs once after the
 * end_of_execution line. The execution frees itself after end(). */
struct execution;
struct execute_collector {
        void (*line)(struct execute_collector *c, json_t *line);
        void (*end)(struct execute_collector *c);
};

/* Starts code in k for c (which must outlive the run, or abandon it);
 * NULL when out of memory. */
struct execution *execute_collect(struct kernel *k, const char *code, double timeout_s,
                                  struct execute_collector *c);
/* The collector is going away before end(): the cell is interrupted, as
 * for an HTTP client that left, and c hears nothing more. Nulls *e. */
void execute_abandon(struct execution **e);

#endif
