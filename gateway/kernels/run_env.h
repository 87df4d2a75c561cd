/* Environment variables for one run of a cell (E2B's run_code(envs=…)),
 * in each language a context can speak.
 *
 * A kernel is a long-lived process: a run's variables are set by a silent
 * cell of the kernel's own language sent just before the user's cell, and
 * put back as they were (or removed) by another sent just after it. Python,
 * bash, R and JavaScript/TypeScript set the process's environment, which
 * what the cell starts inherits; Java, whose environment cannot change once
 * the JVM runs, sets system properties, as E2B's template does.
 *
 * Names and values are never pasted into the code as they come: each
 * value is written as a string literal of the language, with every quote,
 * backslash and control character escaped, and a name must be an
 * identifier (letters, digits and '_', not starting with a digit), so no
 * name or value can end the literal and add code of its own. */
#ifndef GLOVEBOX_RUN_ENV_H
#define GLOVEBOX_RUN_ENV_H

#include <jansson.h>
#include <stdbool.h>

/* The longest name accepted, as for a kernel's environment. */
#define RUN_ENV_MAX_NAME 128

/* Whether name can be a run's environment variable in every language. */
bool run_env_name_valid(const char *name);

/* Whether a kernel of language (a kernelspec's "language", any case) can
 * take a run's variables. */
bool run_env_supported(const char *language);

/* The code that sets env (an object of strings whose names passed
 * run_env_name_valid) in a kernel of language and remembers what was
 * there (*set), and the code that puts that back (*restore). The caller
 * frees both. 0; -ENOTSUP for a language without a way; -EINVAL for a
 * name or value that cannot be written (a bad name, a NUL); -ENOMEM. */
int run_env_code(const char *language, json_t *env, char **set, char **restore);

/* Java code that sets each member of props (an object of strings; a name
 * is written as a literal too, so any name will do) as a system property
 * for good: a Java context's share of the sandbox's own envs, which E2B's
 * Java reads with System.getProperty. The caller frees *code. 0, -EINVAL
 * (a NUL, a value not a string) or -ENOMEM. */
int run_env_java_properties(json_t *props, char **code);

/* obj's compact JSON as hex ("" for NULL), for code that reads it back
 * with bytes.fromhex: nothing in it to quote. NULL when out of memory. */
char *run_env_json_hex(json_t *obj);

#endif
