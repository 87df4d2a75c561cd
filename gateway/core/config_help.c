/* The option table of config.c, printed two ways: --help, wrapped for a
 * terminal, and --help-markdown, the Markdown page docs/flags.md
 * (scripts/gen-flags-doc writes it; tests/docs fails when it differs).
 * Both print from config_option_doc() alone, so that neither can list an
 * option, an argument or a default the other does not. */
#include "autoconf.h"

#include "gateway/core/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --help's width: a terminal's 80 columns, less one. */
#define HELP_WIDTH 79
#define HELP_INDENT 6
#define NO_BREAK '\x1f'

/* What config_load parses itself, outside the table: not values of the
 * configuration, so not keys of a --config file either. */
static const struct config_option_doc extras[] = {
        {"config", "FILE", "", false,
         "read options from a JSON object whose keys are their names, a repeatable one's "
         "values as an array (docs/operations.md#the-configuration-file); the command line "
         "overrides it"},
        {"help", "", "", false, "print this list and exit (also -h)"},
        {"help-markdown", "", "", false,
         "print this list as Markdown, the table of docs/flags.md, and exit"},
        {"version", "", "", false, "print the version and exit"},
};

#define NEXTRAS (sizeof(extras) / sizeof(extras[0]))

/* The i-th option: the table's, then the extras; NULL past them. */
static const struct config_option_doc *option_at(size_t i, struct config_option_doc *doc)
{
        size_t n = 0;

        if (config_option_doc(i, doc) == 0)
                return doc;
        while (config_option_doc(n, doc) == 0)
                n++;
        return i - n < NEXTRAS ? &extras[i - n] : NULL;
}

static bool is_extra(const struct config_option_doc *d)
{
        return d >= extras && d < extras + NEXTRAS;
}

/* A byte size's default also in KiB or MiB, as a reader counts it:
 * "134217728 (128 MiB)". Others as they are. */
static const char *default_text(const struct config_option_doc *d, char *buf, size_t size)
{
        size_t len = strlen(d->name);
        unsigned long long v;
        char *end;

        if (!d->dflt_is_value || len < 6 || strcmp(d->name + len - 6, "-bytes") != 0)
                return d->dflt;
        v = strtoull(d->dflt, &end, 10);
        if (*end || v < 1024 || v % 1024)
                return d->dflt;
        if (v % (1024 * 1024) == 0)
                snprintf(buf, size, "%s (%llu MiB)", d->dflt, v / (1024 * 1024));
        else
                snprintf(buf, size, "%s (%llu KiB)", d->dflt, v / 1024);
        return buf;
}

/* Prints text at column indent, wrapped at spaces within HELP_WIDTH (a
 * word longer than the line stands alone on its own); a NO_BREAK prints as
 * a space where the line is never broken. */
static void print_wrapped(const char *text, int indent)
{
        int col = 0;

        while (*text) {
                size_t word = strcspn(text, " ");

                if (col > indent && col + 1 + (int)word > HELP_WIDTH) {
                        putchar('\n');
                        col = 0;
                }
                if (col == 0)
                        col = printf("%*s", indent, "");
                else
                        col += printf(" ");
                for (size_t k = 0; k < word; k++)
                        putchar(text[k] == NO_BREAK ? ' ' : text[k]);
                col += (int)word;
                text += word;
                while (*text == ' ')
                        text++;
        }
        putchar('\n');
}

void config_print_help(const char *program)
{
        struct config_option_doc doc;
        const struct config_option_doc *d;

        printf("Usage: %s [OPTION]...\n"
               "Glovebox: a self-hosted code interpreter. It serves the Jupyter kernel\n"
               "API, E2B's API and MCP, and runs every kernel in a sandbox of its own.\n\n"
               "Options (also keys of a --config JSON file; S is seconds, N a number):\n",
               program);
        for (size_t i = 0; (d = option_at(i, &doc)); i++) {
                char line[4096], unit[96];

                printf("  --%s%s%s\n", d->name, *d->arg ? " " : "", d->arg);
                if (*d->dflt)
                        snprintf(line, sizeof(line), "%s [default:%c%s]", d->help, NO_BREAK,
                                 default_text(d, unit, sizeof(unit)));
                else
                        snprintf(line, sizeof(line), "%s", d->help);
                print_wrapped(line, HELP_INDENT);
        }
}

/* Writes s, escaped for a Markdown table cell; outside code spans,
 * "--name" becomes code and "docs/PAGE.md#anchor" a link relative to
 * docs/, where the page is. */
static void print_markdown_text(const char *s, bool code)
{
        while (*s) {
                size_t n;

                if (!code && strncmp(s, "docs/", 5) == 0 &&
                    (n = strspn(s + 5, "abcdefghijklmnopqrstuvwxyz0123456789-")) > 0 &&
                    strncmp(s + 5 + n, ".md", 3) == 0) {
                        const char *page = s + 5;
                        size_t len = n + 3, anchor = 0;

                        if (page[len] == '#')
                                anchor = 1 + strspn(page + len + 1,
                                                    "abcdefghijklmnopqrstuvwxyz0123456789-");
                        printf("[docs/%.*s](%.*s)", (int)len, page, (int)(len + anchor), page);
                        s = page + len + anchor;
                        continue;
                }
                if (!code && s[0] == '-' && s[1] == '-' && s[2] >= 'a' && s[2] <= 'z') {
                        n = strspn(s + 2, "abcdefghijklmnopqrstuvwxyz0123456789-");
                        printf("`--%.*s`", (int)n, s + 2);
                        s += 2 + n;
                        continue;
                }
                if (*s == '|')
                        fputs("\\|", stdout);
                else if (code)
                        putchar(*s);
                else if (*s == '<')
                        fputs("&lt;", stdout);
                else if (*s == '>')
                        fputs("&gt;", stdout);
                else if (*s == '&')
                        fputs("&amp;", stdout);
                else if (strchr("\\`*_[]~", *s))
                        printf("\\%c", *s);
                else
                        putchar(*s);
                s++;
        }
}

void config_print_markdown(void)
{
        struct config_option_doc doc;
        const struct config_option_doc *d;

        printf("# Flags\n\n"
               "<!-- Generated by scripts/gen-flags-doc from the option table in "
               "gateway/core/config.c\n"
               "     (glovebox --help-markdown prints it): edit the table, then run the "
               "script. -->\n\n"
               "`glovebox --help` prints the same list for a terminal. `--config FILE` reads "
               "the options\nfrom a JSON object whose keys are their names "
               "(`{\"listen\": \"0.0.0.0:8888\", \"max-kernels\": 50}`;\na repeatable option "
               "takes an array, `\"template\": [\"ds=/srv/ds\"]`, a flag `true` or `false`), "
               "and\nthe command line overrides it. `--check-config` validates them and exits. "
               "The token may\nalso come from the environment, `GLOVEBOX_TOKEN`. `S` is "
               "seconds (fractions too), `N` a\nnumber; sizes are bytes unless the name says "
               "`-mb` (MiB) or `-kib` (KiB).\n\n"
               "| Flag | Default | Meaning |\n|---|---|---|\n");
        for (size_t i = 0; (d = option_at(i, &doc)); i++) {
                char unit[96];

                printf("| `--%s%s", d->name, *d->arg ? " " : "");
                print_markdown_text(d->arg, true);
                fputs("` | ", stdout);
                if (*d->dflt && d->dflt_is_value) {
                        putchar('`');
                        print_markdown_text(d->dflt, true);
                        putchar('`');
                        printf("%s", default_text(d, unit, sizeof(unit)) + strlen(d->dflt));
                } else if (*d->dflt) {
                        print_markdown_text(d->dflt, false);
                } else if (!is_extra(d)) {
                        fputs(*d->arg ? "none" : "off", stdout);
                }
                fputs(" | ", stdout);
                print_markdown_text(d->help, false);
                fputs(" |\n", stdout);
        }
}
