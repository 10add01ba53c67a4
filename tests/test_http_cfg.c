/* test_http_cfg.c - the remote sources' settings and names (io/http_cfg.c), without a server: which
 * paths are URLs; the request URL of s3://bucket/key path-style under an endpoint, virtual-host on
 * AWS (path-style for a bucket that is not one DNS label: dotted, legacy upper case or '_'), as
 * asked for (virtual-host refused for a bucket no host name carries); keys percent-encoded as SigV4's canonical URI
 * has them; names for messages without user:password@; joining (a file's name percent-encoded into
 * an http(s) URL); defaults and the checks of
 * sl_http_cfg_init (a malformed endpoint, half a key pair, an unknown addressing, a control
 * character in a credential, a region that is not a name, an unreadable CA bundle). */
#include "io/http.h"
#include "expect.h"

#include <stdlib.h>
#include <string.h>

static void url_of(const char *name, const sl_load_opts *o, const char *want_url, const char *want_name)
{
    sl_http_cfg c;
    sl_err e = {0};
    sl_http_obj obj;
    sl_status st = sl_http_cfg_init(&c, o, &e);
    EXPECT(st == SL_OK, "cfg for %s: %s", name, sl_err_msg(&e));
    st = sl_http_obj_init(&obj, &c, name, &e);
    EXPECT(st == SL_OK, "%s: %s", name, sl_err_msg(&e));
    if (st == SL_OK) {
        EXPECT(!strcmp(obj.url, want_url), "%s: url %s, want %s", name, obj.url, want_url);
        EXPECT(!strcmp(obj.name, want_name), "%s: name %s, want %s", name, obj.name, want_name);
    }
    sl_http_obj_free(&obj);
    sl_http_cfg_free(&c);
    sl_err_clear(&e);
}

static void cfg_fails(const sl_load_opts *o, const char *want)
{
    sl_http_cfg c;
    sl_err e = {0};
    const sl_status st = sl_http_cfg_init(&c, o, &e);
    EXPECT(st == SL_E_INVALID_ARG && strstr(sl_err_msg(&e), want), "want '%s', got %d '%s'", want, (int)st,
           sl_err_msg(&e));
    sl_http_cfg_free(&c);
    sl_err_clear(&e);
}

int main(void)
{
    EXPECT(sl_http_is_url("http://h/x") && sl_http_is_url("HTTPS://h/") && sl_http_is_url("s3://b/k"), "urls");
    EXPECT(!sl_http_is_url("/data/ck") && !sl_http_is_url("hf://org/name") && !sl_http_is_url("s3:/b") &&
               !sl_http_is_url(NULL), "not urls");

    sl_load_opts o;
    sl_load_opts_init(&o);
    url_of("s3://models/llama/model.safetensors", &o, "https://models.s3.us-east-1.amazonaws.com/llama/model.safetensors",
           "s3://models/llama/model.safetensors");
    o.s3_region = "eu-west-3";
    url_of("s3://my.bucket/a b/x+y.safetensors", &o,
           "https://s3.eu-west-3.amazonaws.com/my.bucket/a%20b/x%2By.safetensors", "s3://my.bucket/a b/x+y.safetensors");
    /* on AWS, virtual-host only for a bucket that is one DNS label: a legacy name (upper case, '_'),
     * or one too short or long, or with a '-' at an end, is path-style (a host name would fold its
     * case, or not be one) */
    url_of("s3://My_Bucket/k", &o, "https://s3.eu-west-3.amazonaws.com/My_Bucket/k", "s3://My_Bucket/k");
    url_of("s3://Models/k", &o, "https://s3.eu-west-3.amazonaws.com/Models/k", "s3://Models/k");
    url_of("s3://ab/k", &o, "https://s3.eu-west-3.amazonaws.com/ab/k", "s3://ab/k");
    url_of("s3://-ab/k", &o, "https://s3.eu-west-3.amazonaws.com/-ab/k", "s3://-ab/k");
    url_of("s3://ab-/k", &o, "https://s3.eu-west-3.amazonaws.com/ab-/k", "s3://ab-/k");
    url_of("s3://a-1-b/k", &o, "https://a-1-b.s3.eu-west-3.amazonaws.com/k", "s3://a-1-b/k");
    url_of("s3://abcdefghij0123456789abcdefghij0123456789abcdefghij0123456789abc/k", &o,
           "https://abcdefghij0123456789abcdefghij0123456789abcdefghij0123456789abc.s3.eu-west-3.amazonaws.com/k",
           "s3://abcdefghij0123456789abcdefghij0123456789abcdefghij0123456789abc/k");
    o.s3_region = "cn-north-1";   /* AWS China: amazonaws.com.cn */
    url_of("s3://models/k", &o, "https://models.s3.cn-north-1.amazonaws.com.cn/k", "s3://models/k");
    o.s3_region = "eu-west-3";
    o.s3_addressing = 1;
    url_of("s3://models/k", &o, "https://s3.eu-west-3.amazonaws.com/models/k", "s3://models/k");
    o.s3_addressing = 0;
    o.s3_endpoint = "http://127.0.0.1:9000/";
    url_of("s3://models/dir/f.safetensors", &o, "http://127.0.0.1:9000/models/dir/f.safetensors",
           "s3://models/dir/f.safetensors");
    o.s3_addressing = 2;
    url_of("s3://models/k~_-.", &o, "http://models.127.0.0.1:9000/k~_-.", "s3://models/k~_-.");
    url_of("s3://my.models/k", &o, "http://my.models.127.0.0.1:9000/k", "s3://my.models/k");
    /* the name leaves out credentials: a user and password, an http(s) query (a SAS signature);
     * an s3:// key may hold '?' */
    url_of("http://user:secret@host:8/d/f.safetensors?sig=1", &o, "http://user:secret@host:8/d/f.safetensors?sig=1",
           "http://host:8/d/f.safetensors");
    url_of("HTTPS://host/d/f.safetensors?sv=1&sig=a/b#frag", &o, "HTTPS://host/d/f.safetensors?sv=1&sig=a/b#frag",
           "HTTPS://host/d/f.safetensors");
    url_of("https://host?sig=x", &o, "https://host?sig=x", "https://host");
    o.s3_addressing = 1;
    url_of("s3://models/k?v=1", &o, "http://127.0.0.1:9000/models/k%3Fv%3D1", "s3://models/k?v=1");
    o.s3_addressing = 2;
    url_of("https://host/d/", &o, "https://host/d/", "https://host/d/");

    sl_http_cfg c;
    sl_err e = {0};
    sl_http_obj obj;
    EXPECT(sl_http_cfg_init(&c, NULL, &e) == SL_OK && !strcmp(c.region, "us-east-1") && !c.endpoint &&
               !c.access_key && c.tune.connections == SL_HTTP_DEFAULT_CONNECTIONS &&
               c.tune.range_bytes == SL_HTTP_DEFAULT_RANGE && c.tune.retries == SL_HTTP_DEFAULT_RETRIES,
           "defaults");
    EXPECT(sl_http_obj_init(&obj, &c, "s3://bad/bucket!/k", &e) == SL_OK, "a '!' in a key is fine");
    sl_http_obj_free(&obj);
    EXPECT(sl_http_obj_init(&obj, &c, "s3://bad!bucket/k", &e) == SL_E_INVALID_ARG &&
               strstr(sl_err_msg(&e), "s3://bad!bucket/k: expected s3://BUCKET/KEY"), "bad bucket: %s", sl_err_msg(&e));
    sl_http_obj_free(&obj);
    EXPECT(sl_http_obj_init(&obj, &c, "http:///x", &e) == SL_E_INVALID_ARG, "no host: %s", sl_err_msg(&e));
    sl_http_obj_free(&obj);
    sl_http_cfg_free(&c);
    sl_err_clear(&e);
    /* virtual-host asked for a bucket no host name carries: refused, naming it */
    o.s3_addressing = 2;
    static const char *const not_hosts[] = {"s3://My_Bucket/k", "s3://a..b/k", "s3://a.-b/k", "s3://ab/k"};
    for (size_t k = 0; k < sizeof not_hosts / sizeof not_hosts[0]; k++) {
        EXPECT(sl_http_cfg_init(&c, &o, &e) == SL_OK, "cfg: %s", sl_err_msg(&e));
        EXPECT(sl_http_obj_init(&obj, &c, not_hosts[k], &e) == SL_E_INVALID_ARG &&
                   strstr(sl_err_msg(&e), "cannot be addressed virtual-host style"),
               "%s virtual-host: %s", not_hosts[k], sl_err_msg(&e));
        sl_http_obj_free(&obj);
        sl_http_cfg_free(&c);
        sl_err_clear(&e);
    }

    sl_load_opts t;
    sl_load_opts_init(&t);
    t.remote_connections = 1000;
    t.remote_range_bytes = 10;
    t.remote_retries = -1;
    sl_http_tune tune;
    sl_http_tune_from(&tune, &t);
    EXPECT(tune.connections == SL_HTTP_MAX_CONNECTIONS && tune.range_bytes == SL_HTTP_MIN_RANGE && tune.retries == 0,
           "bounds: %u %llu %d", tune.connections, (unsigned long long)tune.range_bytes, tune.retries);

    sl_load_opts_init(&o);
    o.s3_endpoint = "ftp://h";
    cfg_fails(&o, "S3 endpoint 'ftp://h': expected http://HOST");
    o.s3_endpoint = "http://h/path";
    cfg_fails(&o, "no path, user or query");
    o.s3_endpoint = NULL;
    o.s3_access_key = "AKIA";
    cfg_fails(&o, "an access key needs its secret key");
    o.s3_access_key = NULL;
    o.s3_addressing = 3;
    cfg_fails(&o, "s3_addressing 3");
    o.s3_addressing = 0;
    /* settings that go into headers and the signature: no control character, a region of
     * letters, digits and -_. (never the value in the message: it may be a secret) */
    o.s3_access_key = "AKIA";
    o.s3_secret_key = "sec";
    o.s3_session_token = "tok\r\nX-Injected: 1";
    cfg_fails(&o, "S3 session token: byte 3 (0x0d) is not allowed (a control character");
    o.s3_session_token = NULL;
    o.s3_secret_key = "s\tc";
    cfg_fails(&o, "S3 secret key: byte 1 (0x09)");
    o.s3_secret_key = "sec";
    o.s3_region = "us:east";
    cfg_fails(&o, "S3 region: byte 2 (0x3a) is not allowed (a region is letters, digits");
    o.s3_region = "a123456789b123456789c123456789d123456789e123456789f123456789g123";   /* 64 */
    cfg_fails(&o, "S3 region: 64 bytes, more than the 63 a region name (a DNS label) can have");
    o.s3_region = "eu-west_3.x";
    o.s3_session_token = "IQoJb3JpZ2luX2VjE/+=";
    sl_http_cfg ok;
    sl_err oe = {0};
    EXPECT(sl_http_cfg_init(&ok, &o, &oe) == SL_OK, "a region of -_. and a token of base64: %s", sl_err_msg(&oe));
    sl_http_cfg_free(&ok);
    sl_err_clear(&oe);
    o.s3_region = NULL;
    o.s3_access_key = o.s3_secret_key = o.s3_session_token = NULL;
    o.ca_bundle = "/nonexistent/ca.pem";   /* refused before any request, naming the file */
    cfg_fails(&o, "CA bundle '/nonexistent/ca.pem': cannot read it: No such file or directory");
    o.ca_bundle = "/dev/null";             /* readable: its CAs are curl's business */
    sl_http_cfg cc;
    sl_err ce = {0};
    EXPECT(sl_http_cfg_init(&cc, &o, &ce) == SL_OK && cc.tune.ca_bundle && !strcmp(cc.tune.ca_bundle, "/dev/null") &&
               cc.tune.ca_bundle == cc.ca_bundle, "ca_bundle kept for the transfers: %s", sl_err_msg(&ce));
    sl_http_cfg_free(&cc);
    sl_err_clear(&ce);

    /* names go before an http(s) query, which every object under it shares */
    static const char *const joins[][3] = {
        {"s3://b/p//", "/x.safetensors", "s3://b/p/x.safetensors"},
        {"s3://b/p?q", "x.safetensors", "s3://b/p?q/x.safetensors"},
        {"https://h/c/d?sv=1&sig=a/b", "x.safetensors", "https://h/c/d/x.safetensors?sv=1&sig=a/b"},
        {"https://h/c/d/?sig=1", "/x", "https://h/c/d/x?sig=1"},
        {"http://h/c#f", "x", "http://h/c/x#f"},
        {"http://h/c/", "x", "http://h/c/x"},
    };
    for (size_t k = 0; k < sizeof joins / sizeof joins[0]; k++) {
        char *j = sl_http_join(joins[k][0], joins[k][1]);
        EXPECT(j && !strcmp(j, joins[k][2]), "join %s + %s: %s, want %s", joins[k][0], joins[k][1],
               j ? j : "(null)", joins[k][2]);
        free(j);
    }
    /* a file's name (an index's shard) is percent-encoded into an http(s) URL, before its query; an
     * S3 key stays raw (the request URL encodes it) */
    static const char *const names[][3] = {
        {"http://h/my%20dir/", "model 1.safetensors", "http://h/my%20dir/model%201.safetensors"},
        {"https://h/c?sig=a%2B", "q?4#x.safetensors", "https://h/c/q%3F4%23x.safetensors?sig=a%2B"},
        {"http://h/c", "50%41.safetensors", "http://h/c/50%2541.safetensors"},
        {"http://h/c", "\xc3\xa9+~_-.safetensors", "http://h/c/%C3%A9%2B~_-.safetensors"},
        {"s3://b/p/", "model 1?#%.safetensors", "s3://b/p/model 1?#%.safetensors"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char *j = sl_http_join_name(names[k][0], names[k][1]);
        EXPECT(j && !strcmp(j, names[k][2]), "join name %s + %s: %s, want %s", names[k][0], names[k][1],
               j ? j : "(null)", names[k][2]);
        free(j);
    }
    return expect_failures ? 1 : 0;
}
