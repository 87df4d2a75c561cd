/* A Model Context Protocol server at {base_url}mcp, over the Streamable
 * HTTP transport (protocol versions 2025-03-26 and 2025-06-18): JSON-RPC
 * requests POSTed one at a time, each answered with application/json;
 * notifications and responses answered 202. An MCP session is one sandbox
 * with a python3 kernel, started at its first tool call and shut down by
 * DELETE, or with the kernel when the idle culler takes it. Its tools run
 * code, read, write and list files, and run shell commands in that
 * sandbox (mcp_tools.c). */
#ifndef GLOVEBOX_MCP_H
#define GLOVEBOX_MCP_H

#include "gateway/core/http.h"

#include <jansson.h>
#include <stdbool.h>

/* Whether path (below the base URL) is the MCP endpoint. */
bool mcp_route(const char *path);
/* Answers a request to the endpoint, now or once its tool call ends. */
void mcp_handle(struct http_request *r);
/* Ends every session (at shutdown; their kernels go with the rest). */
void mcp_shutdown(void);

/* ---- between mcp.c and mcp_tools.c ---- */

struct kernel;

/* One tools/call under way. The tool answers through mcp_call_result
 * exactly once, now or later; the call may be abandoned first (its client
 * left), and then abandon() runs instead and no answer is written. */
struct mcp_call {
        struct http_request *r; /* NULL once its client left */
        json_t *id;             /* the JSON-RPC id, owned */
        json_t *arguments;      /* owned; an object */
        char tool[32];
        char session_id[40];
        void *tool_state;                       /* what the tool keeps while it runs */
        void (*abandon)(struct mcp_call *call); /* stops it; frees tool_state */
        bool answered;
};

/* The tools' list for tools/list (a new reference). */
json_t *mcp_tools_list(void);
/* Whether name is a tool; if it is, checks arguments against its schema:
 * 0, or -EINVAL with err filled (answered as JSON-RPC invalid params). */
int mcp_tools_check(const char *name, json_t *arguments, char *err, size_t errlen);
/* Runs the call's tool in k (ready), answering through mcp_call_result. */
void mcp_tools_run(struct mcp_call *call, struct kernel *k);
/* The call's answer: a tool result {"content": content, "isError"} (both
 * taken over; structured, may be NULL, is its structuredContent). Frees
 * nothing the tool keeps. */
void mcp_call_result(struct mcp_call *call, json_t *content, json_t *structured, bool is_error);
/* A result of one text item: a tool's own failure (isError true). */
void mcp_call_fail(struct mcp_call *call, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
