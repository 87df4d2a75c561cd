#include "autoconf.h"

#include "gateway/e2b/display.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* The extension's source, in the binary itself: no file to find at run
 * time, nothing to install beside the gateway, and the code a sandbox runs
 * is the code that was reviewed with this build. */
__asm__(".section .rodata\n"
        ".balign 16\n"
        "e2b_display_py:\n"
        ".incbin \"" GLOVEBOX_SRCDIR "/gateway/e2b/display.py\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char e2b_display_py[];

/* Where a kernel keeps the compiled extension (e2b_display_compile_expression). */
#define DISPLAY_COMPILED "_glovebox_e2b_display"
#define DISPLAY_FILE     "glovebox/e2b_display.py"

/* The extension's source as a Python string literal (a JSON string is
 * one) between before and after; static storage in *out. */
static const char *with_source(char **out, const char *before, const char *after)
{
        json_t *source;
        char *literal;

        if (*out)
                return *out;
        source = json_string(e2b_display_py);
        literal = json_dumps(source, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
        json_decref(source);
        if (literal && asprintf(out, "%s%s%s", before, literal, after) < 0)
                *out = NULL;
        free(literal);
        return *out;
}

const char *e2b_display_expression(void)
{
        static char *code;

        /* The source runs in a namespace of its own, as an imported module
         * would; compiled here unless the kernel has it compiled already. */
        return with_source(&code,
                           "(lambda ns: (exec(getattr(__import__('sys'), '" DISPLAY_COMPILED
                           "', None) or compile(",
                           ", '" DISPLAY_FILE "', 'exec'), ns), ns['load_ipython_extension']"
                           "(get_ipython())))({'__name__': 'glovebox_e2b_display'})");
}

const char *e2b_display_compile_expression(void)
{
        static char *code;

        return with_source(&code, "setattr(__import__('sys'), '" DISPLAY_COMPILED "', compile(",
                           ", '" DISPLAY_FILE "', 'exec'))");
}
