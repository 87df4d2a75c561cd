#include "autoconf.h"

#include "gateway/kernels/run_env.h"
#include "protocol/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The code for one run's variables is built from a request the HTTP side
 * has already bounded (count, name and value lengths); this only stops a
 * runaway, with every value escaped at most four times its size. */
#define RUN_ENV_MAX_CODE ((size_t)64 << 20)

/* A bash line stays well under the terminal's 4096-byte line (the bash
 * kernel types each cell into a pty, whose canonical mode drops what
 * passes it): a long value is added to in pieces of this many bytes. */
#define BASH_PIECE 512

enum language { LANG_NONE, LANG_PYTHON, LANG_BASH, LANG_R, LANG_JS, LANG_TS, LANG_JAVA };

static enum language language_of(const char *name)
{
        static const struct {
                const char *name;
                enum language language;
        } names[] = {
            {"python", LANG_PYTHON}, {"bash", LANG_BASH},     {"r", LANG_R},
            {"javascript", LANG_JS}, {"typescript", LANG_TS}, {"java", LANG_JAVA},
        };

        for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++) {
                if (strcasecmp(name, names[i].name) == 0)
                        return names[i].language;
        }
        return LANG_NONE;
}

bool run_env_name_valid(const char *name)
{
        size_t len = name ? strlen(name) : 0;

        if (len == 0 || len > RUN_ENV_MAX_NAME || (name[0] >= '0' && name[0] <= '9'))
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = name[i];

                if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '_'))
                        return false;
        }
        return true;
}

bool run_env_supported(const char *language)
{
        return language_of(language) != LANG_NONE;
}

/* ---- string literals ------------------------------------------------------ */

/* Appends s[0..len) as a string literal of lang. Each escapes what ends
 * its literal (its quote, a backslash) and every control character, so a
 * value is one line and only ever data:
 *   Python, JavaScript: JSON's escapes, which both read alike;
 *   R: \\, \" and \xHH (always two digits: a hex digit after them is the
 *      value's own);
 *   Java: \\, \" and three-digit octal escapes; Java turns \uXXXX into
 *      its character before it reads a literal, and with every backslash
 *      of the value doubled, none of the value's can start one;
 *   bash: $'...' with \\, \' and \xHH. */
static int append_literal(struct buf *b, enum language lang, const char *s, size_t len)
{
        static const char hex[] = "0123456789abcdef";
        size_t run = 0;
        int rc;

        if (memchr(s, '\0', len))
                return -EINVAL;
        if (lang == LANG_PYTHON || lang == LANG_JS || lang == LANG_TS)
                return buf_append_json_string(b, s, len);
        rc = buf_append_str(b, lang == LANG_BASH ? "$'" : "\"");
        for (size_t i = 0; rc == 0 && i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                char esc[4] = {'\\', (char)c, 0, 0};
                size_t n = 2;

                if (c >= 0x20 && c != 0x7f && c != '\\' && c != (lang == LANG_BASH ? '\'' : '"'))
                        continue;
                rc = buf_append(b, s + run, i - run);
                run = i + 1;
                if (c < 0x20 || c == 0x7f) {
                        if (lang == LANG_JAVA) {
                                esc[1] = (char)('0' + (c >> 6));
                                esc[2] = (char)('0' + ((c >> 3) & 7));
                                esc[3] = (char)('0' + (c & 7));
                        } else {
                                esc[1] = 'x';
                                esc[2] = hex[c >> 4];
                                esc[3] = hex[c & 15];
                        }
                        n = 4;
                }
                if (rc == 0)
                        rc = buf_append(b, esc, n);
        }
        if (rc == 0)
                rc = buf_append(b, s + run, len - run);
        if (rc == 0)
                rc = buf_append_str(b, lang == LANG_BASH ? "'" : "\"");
        return rc;
}

static int append_value(struct buf *b, enum language lang, json_t *value)
{
        if (!json_is_string(value))
                return -EINVAL;
        return append_literal(b, lang, json_string_value(value), json_string_length(value));
}

/* ---- each language -------------------------------------------------------- */

/* The names of env as a literal of lang's own map or list syntax, with
 * their values when with_values. */
static int append_map(struct buf *b, enum language lang, json_t *env, bool with_values)
{
        const char *name;
        json_t *value;
        bool first = true;
        int rc = buf_append_str(b, lang == LANG_R ? "c(" : "{");

        json_object_foreach(env, name, value) {
                if (rc == 0 && !first)
                        rc = buf_append_str(b, ", ");
                first = false;
                if (rc == 0)
                        rc = append_literal(b, lang, name, strlen(name));
                if (rc == 0 && with_values) {
                        rc = buf_append_str(b, lang == LANG_R ? " = " : ": ");
                        if (rc == 0)
                                rc = append_value(b, lang, value);
                }
        }
        if (rc == 0)
                rc = buf_append_str(b, lang == LANG_R ? ")" : "}");
        return rc;
}

static int python_code(struct buf *set, struct buf *restore, json_t *env)
{
        int rc = buf_append_str(set, "import os as _gb_os\n_gb_env = ");

        if (rc == 0)
                rc = append_map(set, LANG_PYTHON, env, true);
        if (rc == 0)
                rc = buf_append_str(set,
                                    "\n_gb_saved = {k: _gb_os.environ.get(k) for k in _gb_env}\n"
                                    "_gb_os.environ.update(_gb_env)\n");
        if (rc == 0)
                rc = buf_append_str(restore,
                                    "for _gb_k, _gb_v in _gb_saved.items():\n"
                                    "    _gb_os.environ.pop(_gb_k, None) if _gb_v is None else "
                                    "_gb_os.environ.__setitem__(_gb_k, _gb_v)\n"
                                    "del _gb_saved, _gb_env, _gb_k, _gb_v\n");
        return rc;
}

/* What each variable was, as bash's own declare -p says it (or an unset),
 * kept in a variable for the restore to eval: that puts back its value and
 * its attributes (exported or not) alike. */
static int bash_code(struct buf *set, struct buf *restore, json_t *env)
{
        const char *name;
        json_t *value;
        int rc = buf_append_str(set, "__glovebox_env_restore=$(for __glovebox_k in");

        json_object_foreach(env, name, value) {
                if (rc == 0)
                        rc = buf_printf(set, " %s", name);
        }
        if (rc == 0)
                rc = buf_append_str(set, "; do if [[ -v $__glovebox_k ]]; then declare -p "
                                         "\"$__glovebox_k\"; else echo \"unset $__glovebox_k\"; "
                                         "fi; done)\n");
        json_object_foreach(env, name, value) {
                const char *v = json_string_value(value);
                size_t len = json_string_length(value), at = 0;

                if (!v)
                        return -EINVAL;
                do {
                        size_t piece = len - at < BASH_PIECE ? len - at : BASH_PIECE;

                        if (rc == 0)
                                rc = buf_printf(set, "%s%s", name, at ? "+=" : "=");
                        if (rc == 0)
                                rc = append_literal(set, LANG_BASH, v + at, piece);
                        if (rc == 0)
                                rc = buf_append_str(set, "\n");
                        at += piece;
                } while (rc == 0 && at < len);
                if (rc == 0)
                        rc = buf_printf(set, "export %s\n", name);
        }
        if (rc == 0)
                rc = buf_append_str(restore, "eval \"$__glovebox_env_restore\"; unset "
                                             "__glovebox_env_restore __glovebox_k\n");
        return rc;
}

static int r_code(struct buf *set, struct buf *restore, json_t *env)
{
        int rc = buf_append_str(set, ".glovebox_env_saved <- local({\n  env <- ");

        if (rc == 0)
                rc = append_map(set, LANG_R, env, true);
        if (rc == 0)
                rc = buf_append_str(set,
                                    "\n  saved <- Sys.getenv(names(env), unset = NA, names = "
                                    "TRUE)\n  do.call(Sys.setenv, as.list(env))\n  saved\n})\n");
        if (rc == 0)
                rc = buf_append_str(
                    restore,
                    "if (exists(\".glovebox_env_saved\", envir = globalenv(), inherits = FALSE)) "
                    "{\n"
                    "  local({\n    saved <- get(\".glovebox_env_saved\", envir = globalenv())\n"
                    "    gone <- names(saved)[is.na(saved)]\n"
                    "    if (length(gone)) Sys.unsetenv(gone)\n"
                    "    kept <- saved[!is.na(saved)]\n"
                    "    if (length(kept)) do.call(Sys.setenv, as.list(kept))\n  })\n"
                    "  rm(\".glovebox_env_saved\", envir = globalenv())\n}\n");
        return rc;
}

/* TypeScript gets the same code with its types said: a kernel that checks
 * types (tslab) refuses an implicit any. */
static int js_code(struct buf *set, struct buf *restore, json_t *env, bool typed)
{
        const char *any = typed ? ": any" : "";
        const char *global = typed ? "(globalThis as any)" : "globalThis";
        int rc = buf_printf(set,
                            "%s.__gloveboxEnvSaved = ((env%s) => {\n"
                            "  const saved%s = {};\n"
                            "  for (const k of Object.keys(env)) {\n"
                            "    saved[k] = Object.prototype.hasOwnProperty.call(process.env, k) "
                            "? process.env[k] : null;\n"
                            "    process.env[k] = env[k];\n"
                            "  }\n"
                            "  return saved;\n"
                            "})(",
                            global, any, any);

        if (rc == 0)
                rc = append_map(set, LANG_JS, env, true);
        if (rc == 0)
                rc = buf_append_str(set, ");\nundefined;\n");
        if (rc == 0)
                rc = buf_printf(restore,
                                "((saved%s) => {\n"
                                "  for (const k of Object.keys(saved || {})) {\n"
                                "    if (saved[k] === null) delete process.env[k];\n"
                                "    else process.env[k] = saved[k];\n"
                                "  }\n"
                                "})(%s.__gloveboxEnvSaved);\n"
                                "delete %s.__gloveboxEnvSaved;\nundefined;\n",
                                any, global, global);
        return rc;
}

static int java_code(struct buf *set, struct buf *restore, json_t *env)
{
        const char *name;
        json_t *value;
        int rc = buf_append_str(set, "java.util.Map<String, String> __gloveboxEnvSaved = new "
                                     "java.util.HashMap<>();\n");

        json_object_foreach(env, name, value) {
                if (rc == 0)
                        rc = buf_append_str(set, "__gloveboxEnvSaved.put(");
                if (rc == 0)
                        rc = append_literal(set, LANG_JAVA, name, strlen(name));
                if (rc == 0)
                        rc = buf_append_str(set, ", System.setProperty(");
                if (rc == 0)
                        rc = append_literal(set, LANG_JAVA, name, strlen(name));
                if (rc == 0)
                        rc = buf_append_str(set, ", ");
                if (rc == 0)
                        rc = append_value(set, LANG_JAVA, value);
                if (rc == 0)
                        rc = buf_append_str(set, "));\n");
        }
        if (rc == 0)
                rc = buf_append_str(
                    restore, "if (__gloveboxEnvSaved != null) {\n"
                             "  for (java.util.Map.Entry<String, String> e : "
                             "__gloveboxEnvSaved.entrySet()) {\n"
                             "    if (e.getValue() == null) System.clearProperty(e.getKey());\n"
                             "    else System.setProperty(e.getKey(), e.getValue());\n"
                             "  }\n"
                             "}\n"
                             "__gloveboxEnvSaved = null;\n");
        return rc;
}

/* ---- entry points ----------------------------------------------------------- */

static int check_names(json_t *env)
{
        const char *name;
        json_t *value;

        json_object_foreach(env, name, value) {
                if (!run_env_name_valid(name) || !json_is_string(value))
                        return -EINVAL;
        }
        return 0;
}

int run_env_code(const char *language, json_t *env, char **set, char **restore)
{
        enum language lang = language_of(language);
        struct buf s, r;
        int rc;

        *set = *restore = NULL;
        if (lang == LANG_NONE)
                return -ENOTSUP;
        if (!json_is_object(env) || check_names(env) < 0)
                return -EINVAL;
        buf_init(&s, RUN_ENV_MAX_CODE);
        buf_init(&r, RUN_ENV_MAX_CODE);
        switch (lang) {
        case LANG_PYTHON:
                rc = python_code(&s, &r, env);
                break;
        case LANG_BASH:
                rc = bash_code(&s, &r, env);
                break;
        case LANG_R:
                rc = r_code(&s, &r, env);
                break;
        case LANG_JS:
        case LANG_TS:
                rc = js_code(&s, &r, env, lang == LANG_TS);
                break;
        case LANG_JAVA:
                rc = java_code(&s, &r, env);
                break;
        default:
                rc = -ENOTSUP;
                break;
        }
        if (rc == 0) {
                *set = buf_steal(&s, NULL);
                *restore = buf_steal(&r, NULL);
                if (!*set || !*restore)
                        rc = -ENOMEM;
        }
        if (rc < 0) {
                free(*set);
                free(*restore);
                *set = *restore = NULL;
        }
        buf_free(&s);
        buf_free(&r);
        return rc == -E2BIG ? -ENOMEM : rc;
}

int run_env_java_properties(json_t *props, char **code)
{
        const char *name;
        json_t *value;
        struct buf b;
        /* A property's name is written as a literal too: any name is safe. */
        int rc = json_is_object(props) ? 0 : -EINVAL;

        *code = NULL;
        buf_init(&b, RUN_ENV_MAX_CODE);
        json_object_foreach(props, name, value) {
                if (rc == 0)
                        rc = buf_append_str(&b, "System.setProperty(");
                if (rc == 0)
                        rc = append_literal(&b, LANG_JAVA, name, strlen(name));
                if (rc == 0)
                        rc = buf_append_str(&b, ", ");
                if (rc == 0)
                        rc = append_value(&b, LANG_JAVA, value);
                if (rc == 0)
                        rc = buf_append_str(&b, ");\n");
        }
        if (rc == 0) {
                *code = b.data ? buf_steal(&b, NULL) : strdup("");
                if (!*code)
                        rc = -ENOMEM;
        }
        buf_free(&b);
        return rc == -E2BIG ? -ENOMEM : rc;
}

char *run_env_json_hex(json_t *obj)
{
        static const char digits[] = "0123456789abcdef";
        char *text = obj ? json_dumps(obj, JSON_COMPACT) : strdup("");
        size_t len = text ? strlen(text) : 0;
        char *hex = text ? malloc(2 * len + 1) : NULL;

        for (size_t i = 0; hex && i < len; i++) {
                hex[2 * i] = digits[(unsigned char)text[i] >> 4];
                hex[2 * i + 1] = digits[(unsigned char)text[i] & 15];
        }
        if (hex)
                hex[2 * len] = '\0';
        free(text);
        return hex;
}
