/* gateway/kernels/run_env.c: a run's env vars as code of each language. The
 * literals are checked byte for byte here; tests/integration/test_languages.py
 * runs the code in real kernels with the same kind of values. */
#include "autoconf.h"

#include "gateway/kernels/run_env.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A value with every character that could end a literal or start code. */
static const char nasty[] = "a'b\"c\\d\\u0022e\nf\x03g$(x)`y`";

static json_t *env_of(const char *name, const char *value)
{
        json_t *env = json_object();

        json_object_set_new(env, name, json_string(value));
        return env;
}

/* Whether code of language for {name: value} sets it with want in it. */
static void check_set(const char *language, const char *value, const char *want, const char *what)
{
        json_t *env = env_of("GB_V", value);
        char *set = NULL, *restore = NULL;
        int rc = run_env_code(language, env, &set, &restore);

        is_int(rc, 0, "%s: code made", language);
        ok(set && strstr(set, want), "%s: %s", language, what);
        if (set && !strstr(set, want))
                diag("set code: %s", set);
        ok(restore && *restore, "%s: a restore", language);
        free(set);
        free(restore);
        json_decref(env);
}

static void test_literals(void)
{
        check_set("python", nasty, "\"GB_V\": \"a'b\\\"c\\\\d\\\\u0022e\\u000af\\u0003g$(x)`y`\"",
                  "JSON's escapes, which Python reads alike");
        check_set("javascript", nasty,
                  "{\"GB_V\": \"a'b\\\"c\\\\d\\\\u0022e\\u000af\\u0003g$(x)`y`\"}",
                  "JSON's escapes, which JavaScript reads alike");
        check_set("TypeScript", nasty, "((env: any) =>", "typed for a kernel that checks types");
        check_set("javascript", "v", "((env) =>", "untyped");
        check_set("r", nasty, "c(\"GB_V\" = \"a'b\\\"c\\\\d\\\\u0022e\\x0af\\x03g$(x)`y`\")",
                  "\\\\, \\\" and two-digit \\x escapes");
        check_set("java", nasty,
                  "System.setProperty(\"GB_V\", \"a'b\\\"c\\\\d\\\\u0022e\\012f\\003g$(x)`y`\")",
                  "octal escapes and every backslash doubled (no \\u of the value's own)");
        check_set("bash", nasty, "GB_V=$'a\\'b\"c\\\\d\\\\u0022e\\x0af\\x03g$(x)`y`'\nexport GB_V",
                  "$'...' with \\', \\\\ and \\x: no expansion, one line");
        check_set("R", "x", "Sys.setenv", "the language's case does not matter");
}

static void test_bash_long_value(void)
{
        char *value = malloc(1300), *set = NULL, *restore = NULL, *line, *end;
        json_t *env;
        size_t lines = 0, longest = 0;

        memset(value, 'v', 1299);
        value[1299] = '\0';
        env = env_of("LONG", value);
        is_int(run_env_code("bash", env, &set, &restore), 0, "bash: a 1300-byte value");
        for (line = set; line && *line; line = end + 1) {
                end = strchr(line, '\n');
                if (!end)
                        break;
                longest = (size_t)(end - line) > longest ? (size_t)(end - line) : longest;
                lines += strncmp(line, "LONG", 4) == 0;
        }
        is_uint(lines, 3, "set in three pieces (=, +=, +=)");
        ok(longest < 1024, "no line near the terminal's 4096 bytes (longest %zu)", longest);
        ok(set && strstr(set, "LONG+=$'"), "later pieces add to it");
        free(set);
        free(restore);
        free(value);
        json_decref(env);
}

static void test_refusals(void)
{
        static const char *const bad[] = {"",         "1A",  "A-B",  "A B",     "A;B",
                                          "user.dir", "A'B", "A\nB", "\xc3\xa9"};
        char *set = (char *)"x", *restore = (char *)"x";
        char longest[RUN_ENV_MAX_NAME + 2];
        json_t *env;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                ok(!run_env_name_valid(bad[i]), "bad name %zu refused", i);
        ok(run_env_name_valid("_a9") && run_env_name_valid("PATH"), "identifiers accepted");
        memset(longest, 'A', sizeof(longest) - 1);
        longest[sizeof(longest) - 1] = '\0';
        ok(!run_env_name_valid(longest), "a name of %d bytes refused", RUN_ENV_MAX_NAME + 1);
        longest[RUN_ENV_MAX_NAME] = '\0';
        ok(run_env_name_valid(longest), "one of %d accepted", RUN_ENV_MAX_NAME);

        env = env_of("A-B", "v");
        is_int(run_env_code("bash", env, &set, &restore), -EINVAL, "a bad name: -EINVAL");
        ok(set == NULL && restore == NULL, "and nothing to free");
        json_decref(env);
        env = env_of("A", "v");
        is_int(run_env_code("cobol", env, &set, &restore), -ENOTSUP, "cobol: -ENOTSUP");
        ok(!run_env_supported("cobol") && !run_env_supported(NULL) && run_env_supported("R"),
           "supported languages");
        json_object_set_new(env, "B", json_integer(1));
        is_int(run_env_code("python", env, &set, &restore), -EINVAL, "a value not a string");
        json_decref(env);
        env = json_object();
        json_object_set_new(env, "A", json_stringn("a\0b", 3));
        is_int(run_env_code("java", env, &set, &restore), -EINVAL, "a NUL in a value");
        json_decref(env);
}

static void test_java_properties(void)
{
        json_t *props = env_of("user.dir", "/home/user");
        char *code = NULL;

        json_object_set_new(props, "T", json_string("q\"\\"));
        is_int(run_env_java_properties(props, &code), 0, "properties of any name");
        is_str(code,
               "System.setProperty(\"user.dir\", \"/home/user\");\n"
               "System.setProperty(\"T\", \"q\\\"\\\\\");\n",
               "each set for good, escaped");
        free(code);
        json_decref(props);
        props = json_object();
        is_int(run_env_java_properties(props, &code), 0, "none");
        is_str(code, "", "is no code");
        free(code);
        json_decref(props);
}

int main(void)
{
        test_literals();
        test_bash_long_value();
        test_refusals();
        test_java_properties();
        return done_testing();
}
