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

const char *e2b_display_expression(void)
{
        static char *code;
        json_t *source;
        char *literal;

        if (code)
                return code;
        /* A JSON string is a valid Python string literal. The source runs in
         * a namespace of its own, as an imported module would. */
        source = json_string(e2b_display_py);
        literal = json_dumps(source, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
        json_decref(source);
        if (literal &&
            asprintf(&code,
                     "(lambda ns: (exec(compile(%s, 'glovebox/e2b_display.py', 'exec'), ns), "
                     "ns['load_ipython_extension'](get_ipython())))({'__name__': "
                     "'glovebox_e2b_display'})",
                     literal) < 0)
                code = NULL;
        free(literal);
        return code;
}
