/* The result formats E2B's own Python kernel adds, and its SDKs read:
 * "e2b/data" (a pandas DataFrame as JSON, the result's `data`) and
 * "e2b/chart" (a matplotlib figure as E2B's chart model, the result's
 * `chart`). An IPython extension, gateway/e2b/display.py, makes them; it is
 * built into the gateway and run in every E2B Python code context. */
#ifndef GLOVEBOX_E2B_DISPLAY_H
#define GLOVEBOX_E2B_DISPLAY_H

/* A Python expression that loads the extension into the kernel it is
 * evaluated in, leaving no name behind in the user's namespace. Static
 * storage; NULL if it could not be built (out of memory). */
const char *e2b_display_expression(void);
/* A Python expression that compiles the extension and keeps the code in
 * the kernel (the sys module), unrun: e2b_display_expression's compiling
 * (2.6 to 7 ms of the kernel's CPU, by the CPU, the source being 22 KiB)
 * done ahead, by a kernel that waits in the warm pool. Static storage; NULL if out of
 * memory. */
const char *e2b_display_compile_expression(void);

#endif
