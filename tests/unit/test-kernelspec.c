/* protocol/kernelspec.c: discovery over a real directory tree, precedence,
 * validation and the search path. */
#include "autoconf.h"

#include "protocol/kernelspec.h"
#include "protocol/log.h"
#include "tests/unit/tap.h"
#include "tests/unit/tmpdir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

static char root[] = "/tmp/glovebox-test-kernelspec-XXXXXX";
static char err[256];

static void put_file(const char *rel, const char *body)
{
        char path[PATH_MAX];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", root, rel);
        f = fopen(path, "w");
        if (!f || fputs(body, f) < 0 || fclose(f) != 0)
                BAIL_OUT("cannot write %s", path);
}

static void put_dir(const char *rel)
{
        char path[PATH_MAX];

        snprintf(path, sizeof(path), "%s/%s", root, rel);
        if (mkdir(path, 0755) < 0)
                BAIL_OUT("cannot create %s", path);
}

static const char *spec_string(const struct jp_kernelspec *ks, const char *key)
{
        return ks ? json_string_value(json_object_get(ks->spec, key)) : NULL;
}

static int has_resource(const struct jp_kernelspec *ks, const char *name)
{
        for (char **r = ks ? ks->resources : NULL; r && *r; r++) {
                if (strcmp(*r, name) == 0)
                        return 1;
        }
        return 0;
}

static size_t count_resources(const struct jp_kernelspec *ks)
{
        size_t n = 0;

        for (char **r = ks ? ks->resources : NULL; r && *r; r++)
                n++;
        return n;
}

/* a/kernels and b/kernels, as two entries of a search path. */
static void build_tree(void)
{
        char big[JP_KERNELSPEC_MAX_FILE + 64];

        put_dir("a");
        put_dir("a/kernels");
        put_dir("a/kernels/python3");
        put_file("a/kernels/python3/kernel.json",
                 "{\"argv\":[\"/usr/bin/python3\",\"-m\",\"ipykernel_launcher\",\"-f\","
                 "\"{connection_file}\"],\"display_name\":\"Python 3 (a)\",\"language\":"
                 "\"python\",\"metadata\":{\"debugger\":true}}");
        put_file("a/kernels/python3/logo-32x32.png", "png");
        put_file("a/kernels/python3/logo-svg.svg", "svg");
        put_file("a/kernels/python3/kernel.js", "js");
        put_file("a/kernels/python3/README.txt", "not a resource");
        put_file("a/kernels/python3/logo-.png", "too short a name");
        put_dir("a/kernels/broken");
        put_file("a/kernels/broken/kernel.json", "{\"argv\":[\"x\"],");
        put_dir("a/kernels/noargv");
        put_file("a/kernels/noargv/kernel.json", "{\"argv\":[],\"display_name\":\"No argv\"}");
        put_dir("a/kernels/nojson");
        put_dir("a/kernels/bad name");
        put_file("a/kernels/bad name/kernel.json", "{\"argv\":[\"x\"],\"display_name\":\"x\"}");
        put_dir("a/kernels/.hidden");
        put_file("a/kernels/.hidden/kernel.json", "{\"argv\":[\"x\"],\"display_name\":\"x\"}");
        put_file("a/kernels/plainfile", "not a directory");
        put_dir("a/kernels/huge");
        memset(big, ' ', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        {
                static const char huge[] = "{\"argv\":[\"x\"],\"display_name\":\"huge\"}";

                memcpy(big, huge, strlen(huge));
        }
        put_file("a/kernels/huge/kernel.json", big);

        put_dir("b");
        put_dir("b/kernels");
        put_dir("b/kernels/python3");
        put_file("b/kernels/python3/kernel.json",
                 "{\"argv\":[\"python3\"],\"display_name\":\"Python 3 (b)\"}");
        put_dir("b/kernels/ir");
        put_file("b/kernels/ir/kernel.json",
                 "{\"argv\":[\"R\",\"--slave\"],\"display_name\":\"R\",\"language\":\"R\","
                 "\"interrupt_mode\":\"message\",\"env\":{\"R_LIBS\":\"/x\"}}");
        put_dir("b/kernels/broken");
        put_file("b/kernels/broken/kernel.json",
                 "{\"argv\":[\"ok\"],\"display_name\":\"valid in b\"}");
}

static void test_discover(void)
{
        char a[PATH_MAX], b[PATH_MAX], missing[PATH_MAX], expect[PATH_MAX + 16];
        char *path_ab[] = {missing, a, b, NULL};
        char *path_ba[] = {b, a, NULL};
        struct jp_kernelspec_list list;
        const struct jp_kernelspec *py, *ir, *broken;

        snprintf(a, sizeof(a), "%s/a/kernels", root);
        snprintf(b, sizeof(b), "%s/b/kernels", root);
        snprintf(missing, sizeof(missing), "%s/missing/kernels", root);

        is_int(jp_kernelspec_discover(path_ab, &list), 0, "discover over a, b");
        is_uint(list.count, 3, "python3, ir and broken (from b) are found");
        py = jp_kernelspec_find(&list, "python3");
        ir = jp_kernelspec_find(&list, "ir");
        broken = jp_kernelspec_find(&list, "broken");
        ok(py && ir && broken, "each can be found by name");
        is_str(spec_string(py, "display_name"), "Python 3 (a)", "the first directory wins");
        snprintf(expect, sizeof(expect), "%s/python3", a);
        is_str(py ? py->dir : NULL, expect, "dir is where the winner lives");
        is_str(spec_string(broken, "display_name"), "valid in b",
               "an invalid kernel.json does not hide a valid one later in the path");
        /* A kernelspec removed from disk stays in the list (kernels point
         * at it) but is never found again. */
        if (ir) {
                ((struct jp_kernelspec *)ir)->removed = true;
                ok(!jp_kernelspec_find(&list, "ir"), "a removed kernelspec is not found");
                ((struct jp_kernelspec *)ir)->removed = false;
                ok(jp_kernelspec_find(&list, "ir") == ir, "found again when back");
        }
        ok(!jp_kernelspec_find(&list, "noargv"), "argv [] is skipped");
        ok(!jp_kernelspec_find(&list, "nojson"), "a directory without kernel.json is skipped");
        ok(!jp_kernelspec_find(&list, "bad name"), "an invalid name is skipped");
        ok(!jp_kernelspec_find(&list, ".hidden"), "a hidden directory is skipped");
        ok(!jp_kernelspec_find(&list, "plainfile"), "a plain file is skipped");
        ok(!jp_kernelspec_find(&list, "huge"), "a kernel.json over %d bytes is skipped",
           JP_KERNELSPEC_MAX_FILE);
        ok(!jp_kernelspec_find(&list, "PYTHON3"), "find is case-sensitive");

        is_uint(count_resources(py), 3, "python3 has three resources");
        ok(has_resource(py, "logo-32x32.png") && has_resource(py, "logo-svg.svg") &&
               has_resource(py, "kernel.js"),
           "logos and kernel.js are listed");
        ok(!has_resource(py, "README.txt") && !has_resource(py, "kernel.json") &&
               !has_resource(py, "logo-.png"),
           "other files are not");
        is_uint(count_resources(ir), 0, "ir has no resources");
        ok(ir && ir->resources != NULL, "an empty resource list is still a list");

        ok(py && !py->interrupt_by_message, "python3 is interrupted by signal");
        ok(ir && ir->interrupt_by_message, "ir is interrupted by message");
        is_str(spec_string(py, "interrupt_mode"), "signal", "interrupt_mode defaults to signal");
        is_str(spec_string(ir, "language"), "R", "language kept");
        is_str(spec_string(jp_kernelspec_find(&list, "broken"), "language"), "",
               "language defaults to empty");
        ok(py && json_is_object(json_object_get(py->spec, "env")) &&
               json_object_size(json_object_get(py->spec, "env")) == 0,
           "env defaults to {}");
        ok(py && json_is_true(json_object_get(json_object_get(py->spec, "metadata"), "debugger")),
           "metadata kept");
        ok(ir && json_is_string(json_object_get(json_object_get(ir->spec, "env"), "R_LIBS")),
           "env kept");
        jp_kernelspec_list_free(&list);
        ok(list.items == NULL && list.count == 0, "the list is emptied when freed");

        is_int(jp_kernelspec_discover(path_ba, &list), 0, "discover over b, a");
        is_str(spec_string(jp_kernelspec_find(&list, "python3"), "display_name"), "Python 3 (b)",
               "reversing the path reverses the winner");
        jp_kernelspec_list_free(&list);

        is_int(jp_kernelspec_discover(NULL, &list), 0, "a NULL path");
        is_uint(list.count, 0, "finds nothing");
        jp_kernelspec_list_free(&list);
}

static int parse(const char *json)
{
        struct jp_kernelspec ks;
        int rc;

        memset(&ks, 0, sizeof(ks));
        err[0] = '\0';
        rc = jp_kernelspec_parse(json, strlen(json), &ks, err, sizeof(err));
        json_decref(ks.spec);
        return rc;
}

static void test_parse(void)
{
        char json[8192];
        size_t n;

        is_int(parse("{\"argv\":[\"k\"],\"display_name\":\"K\"}"), 0, "the minimal kernel.json");
#define BAD(text, name)                                                                            \
        do {                                                                                       \
                is_int(parse(text), -EINVAL, name);                                                \
                ok(err[0] != '\0', name ": reason \"%s\"", err);                                   \
        } while (0)
        BAD("", "empty");
        BAD("[\"k\"]", "an array");
        BAD("{\"display_name\":\"K\"}", "argv missing");
        BAD("{\"argv\":\"k\",\"display_name\":\"K\"}", "argv a string");
        BAD("{\"argv\":[],\"display_name\":\"K\"}", "argv empty");
        BAD("{\"argv\":[1],\"display_name\":\"K\"}", "argv with a number");
        BAD("{\"argv\":[\"\"],\"display_name\":\"K\"}", "argv with an empty string");
        BAD("{\"argv\":[\"a\\u0000b\"],\"display_name\":\"K\"}", "argv with a NUL");
        BAD("{\"argv\":[\"k\"]}", "display_name missing");
        BAD("{\"argv\":[\"k\"],\"display_name\":[]}", "display_name an array");
        BAD("{\"argv\":[\"k\"],\"display_name\":\"K\",\"env\":[]}", "env an array");
        BAD("{\"argv\":[\"k\"],\"display_name\":\"K\",\"interrupt_mode\":\"bogus\"}",
            "interrupt_mode bogus");
        BAD("{\"argv\":[\"k\"],\"display_name\":\"K\",\"interrupt_mode\":1}",
            "interrupt_mode a number");
        BAD("{\"argv\":[\"k\"],\"display_name\":\"K\",\"metadata\":{\"glovebox\":"
            "{\"template\":3}}}",
            "metadata.glovebox.template a number");
        BAD("{\"argv\":[\"k\"],\"display_name\":\"K\",\"metadata\":{\"glovebox\":"
            "{\"template\":\"../etc\"}}}",
            "metadata.glovebox.template not a name");
        BAD("{\"argv\":[\"k\"],\"display_name\":\"K\",\"metadata\":{\"glovebox\":"
            "{\"requires\":\"java\"}}}",
            "metadata.glovebox.requires a string");
        BAD("{\"argv\":[\"k\"],\"display_name\":\"K\",\"metadata\":{\"glovebox\":"
            "{\"requires\":[\"bin/java\"]}}}",
            "metadata.glovebox.requires a relative path");
        BAD("{\"argv\":[\"k\"],\"display_name\":\"K\",\"metadata\":{\"glovebox\":"
            "{\"requires\":[\"\"]}}}",
            "metadata.glovebox.requires an empty name");
        is_int(parse("{\"argv\":[\"k\"],\"display_name\":\"K\",\"metadata\":{\"glovebox\":"
                     "{\"requires\":[\"java\",\"/usr/bin/jshell\"]}}}"),
               0, "metadata.glovebox.requires: names and absolute paths");

        n = (size_t)snprintf(json, sizeof(json), "{\"display_name\":\"K\",\"argv\":[\"k\"");
        for (int i = 1; i < JP_KERNELSPEC_MAX_ARGS; i++)
                n += (size_t)snprintf(json + n, sizeof(json) - n, ",\"a\"");
        snprintf(json + n, sizeof(json) - n, "]}");
        is_int(parse(json), 0, "argv of %d entries", JP_KERNELSPEC_MAX_ARGS);
        snprintf(json + n, sizeof(json) - n, ",\"a\"]}");
        BAD(json, "argv of one entry too many");
#undef BAD
}

/* A kernelspec may name the template its kernels run in. */
static void test_template_name(void)
{
        const char *json = "{\"argv\":[\"k\"],\"display_name\":\"K\",\"metadata\":"
                           "{\"glovebox\":{\"template\":\"ds-1.0\"}}}";
        struct jp_kernelspec_list list = {NULL, 0, 0};
        struct jp_kernelspec ks;

        memset(&ks, 0, sizeof(ks));
        is_int(jp_kernelspec_parse(json, strlen(json), &ks, err, sizeof(err)), 0,
               "a template's name in metadata.glovebox.template");
        is_str(ks.template_name, "ds-1.0", "its template");
        snprintf(ks.name, sizeof(ks.name), "orig");
        ks.root_len = 4;
        is_int(jp_kernelspec_list_append(&list, &ks, "copy"), 0, "appended as a copy");
        json_decref(ks.spec);
        ok(list.count == 1 && strcmp(list.items[0].name, "copy") == 0, "under its new name");
        is_str(list.items[0].template_name, "ds-1.0", "the copy keeps its template");
        is_uint(list.items[0].root_len, 4, "and where its tree ends");
        ok(json_is_array(json_object_get(list.items[0].spec, "argv")), "its own spec");
        jp_kernelspec_list_free(&list);

        memset(&ks, 0, sizeof(ks));
        json = "{\"argv\":[\"k\"],\"display_name\":\"K\"}";
        is_int(jp_kernelspec_parse(json, strlen(json), &ks, err, sizeof(err)), 0, "no template");
        is_str(ks.template_name, "", "no template: an empty name");
        json_decref(ks.spec);
}

static void test_names(void)
{
        char name[JP_KERNELSPEC_NAME_SIZE + 1];

        ok(jp_kernelspec_name_valid("python3"), "python3");
        ok(jp_kernelspec_name_valid("My-Kernel_1.0"), "letters, digits, '-', '_' and '.'");
        ok(jp_kernelspec_name_valid("a"), "one character");
        ok(!jp_kernelspec_name_valid(""), "empty");
        ok(!jp_kernelspec_name_valid("a/b"), "a slash");
        ok(!jp_kernelspec_name_valid("a b"), "a space");
        ok(!jp_kernelspec_name_valid("a\\b"), "a backslash");
        ok(!jp_kernelspec_name_valid("caf\xc3\xa9"), "non-ASCII");
        ok(!jp_kernelspec_name_valid("a\nb"), "a newline");
        memset(name, 'n', sizeof(name));
        name[JP_KERNELSPEC_NAME_SIZE - 1] = '\0';
        ok(jp_kernelspec_name_valid(name), "%d characters", JP_KERNELSPEC_NAME_SIZE - 1);
        name[JP_KERNELSPEC_NAME_SIZE - 1] = 'n';
        name[JP_KERNELSPEC_NAME_SIZE] = '\0';
        ok(!jp_kernelspec_name_valid(name), "%d characters", JP_KERNELSPEC_NAME_SIZE);
}

static size_t strv_len(char **v)
{
        size_t n = 0;

        while (v && v[n])
                n++;
        return n;
}

static void test_search_path(void)
{
        char jpath[PATH_MAX * 2 + 8], expect[PATH_MAX];
        char **v;
        struct jp_kernelspec_list list;

        setenv("HOME", "/home/tester", 1);
        setenv("JUPYTER_PATH", "/j1::/j2", 1);
        v = jp_kernelspec_search_path("/x1:/x2:");
        is_uint(strv_len(v), 7, "extra, JUPYTER_PATH, home and the system directories");
        if (strv_len(v) == 7) {
                is_str(v[0], "/x1", "extra entries come first");
                is_str(v[1], "/x2", "in their order");
                is_str(v[2], "/j1/kernels", "then JUPYTER_PATH entries with /kernels");
                is_str(v[3], "/j2/kernels", "empty JUPYTER_PATH entries are skipped");
                is_str(v[4], "/home/tester/.local/share/jupyter/kernels", "then the user's");
                is_str(v[5], "/usr/local/share/jupyter/kernels", "then /usr/local");
                is_str(v[6], "/usr/share/jupyter/kernels", "then /usr");
        }
        jp_strv_free(v);

        unsetenv("JUPYTER_PATH");
        setenv("HOME", "", 1);
        v = jp_kernelspec_search_path(NULL);
        is_uint(strv_len(v), 2, "no extra, no JUPYTER_PATH, empty HOME: the system directories");
        jp_strv_free(v);

        /* JUPYTER_PATH leads discovery to kernels the default path lacks. */
        snprintf(jpath, sizeof(jpath), "%s/b:%s/a", root, root);
        setenv("JUPYTER_PATH", jpath, 1);
        v = jp_kernelspec_search_path(NULL);
        snprintf(expect, sizeof(expect), "%s/b/kernels", root);
        is_str(v ? v[0] : NULL, expect, "JUPYTER_PATH/kernels heads the path");
        is_int(jp_kernelspec_discover(v, &list), 0, "discover along it");
        ok(jp_kernelspec_find(&list, "ir") != NULL, "finds ir through JUPYTER_PATH");
        is_str(spec_string(jp_kernelspec_find(&list, "python3"), "display_name"), "Python 3 (b)",
               "JUPYTER_PATH order is precedence order");
        jp_kernelspec_list_free(&list);
        jp_strv_free(v);
}

static void test_strv_contains(void)
{
        static const char *const v[] = {"List", "SendSignal", NULL};

        ok(jp_strv_contains(v, "List") && jp_strv_contains(v, "SendSignal"), "strv: members found");
        ok(!jp_strv_contains(v, "list") && !jp_strv_contains(v, "Lis") &&
               !jp_strv_contains(v, ""),
           "strv: exact, case-sensitive matches only");
        ok(!jp_strv_contains(NULL, "List"), "strv: a NULL list holds nothing");
}

/* An environment kept in a state record, and back. */
static void test_strv_json(void)
{
        char *env[] = {"A=1", "B=two words", NULL}, **back = NULL;
        json_t *array = jp_strv_to_json(env), *odd = json_pack("[s, i, s]", "X=1", 5, "Y=2");
        char *text = array ? json_dumps(array, JSON_COMPACT) : NULL;

        is_str(text, "[\"A=1\",\"B=two words\"]", "an environment as a JSON array");
        is_int(jp_strv_from_json(array, &back), 0, "and back");
        ok(back && !strcmp(back[0], "A=1") && !strcmp(back[1], "B=two words") && !back[2],
           "the same strings, NULL-terminated");
        jp_strv_free(back);
        is_int(jp_strv_from_json(odd, &back), 0, "an entry that is not a string");
        ok(back && !strcmp(back[0], "X=1") && !strcmp(back[1], "") && !strcmp(back[2], "Y=2") &&
               !back[3],
           "becomes \"\" in its place");
        jp_strv_free(back);
        is_int(jp_strv_from_json(NULL, &back), 0, "no array");
        ok(back && !back[0], "no entries");
        jp_strv_free(back);
        free(text);
        json_decref(array);
        array = jp_strv_to_json(NULL);
        ok(array && json_array_size(array) == 0, "no environment: an empty array");
        json_decref(array);
        json_decref(odd);
}

int main(void)
{
        /* Skipped kernelspecs are logged as warnings; keep the TAP log clean. */
        log_threshold = LOG_LEVEL_ERROR;
        if (!mkdtemp(root))
                BAIL_OUT("mkdtemp: %s", strerror(errno));
        build_tree();
        test_discover();
        test_parse();
        test_template_name();
        test_names();
        test_search_path();
        test_strv_contains();
        if (tmpdir_remove(root) < 0)
                diag("could not remove %s", root);
        test_strv_json();
        return done_testing();
}
