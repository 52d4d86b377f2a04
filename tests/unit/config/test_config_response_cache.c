/* Unit tests for the config's response cache keys (src/config/response_cache.c,
 * session_pools[].response_cache): defaults, every key read into its field,
 * and errors naming the key and what is expected. */
#include "config_helpers.h"

static void test_defaults(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(POOL(""));
  assert_int_equal(cfg->response_cache.backend, SIP__RCACHE_MEMORY);
  assert_int_equal(cfg->response_cache.max_bytes, (size_t)64 << 20);
  assert_null(cfg->response_cache.redis_address);
  assert_int_equal(cfg->response_cache.redis_ttl_s, 3600);
  assert_int_equal(cfg->response_cache.redis_timeout_ms, 50);
  assert_int_equal(cfg->pools[0].response_cache, 0);
  sip__config_free(cfg);
}

static void test_every_key(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(
      "server:\n"
      "  response_cache:\n"
      "    backend: redis\n"
      "    max_bytes: 2MiB\n"
      "    redis: {address: \"[::1]:6380\", ttl_s: 0, timeout_ms: 250}\n" POOL(
          "    response_cache: true\n"));
  assert_int_equal(cfg->response_cache.backend, SIP__RCACHE_REDIS);
  assert_int_equal(cfg->response_cache.max_bytes, (size_t)2 << 20);
  assert_string_equal(cfg->response_cache.redis_address, "[::1]:6380");
  assert_int_equal(cfg->response_cache.redis_ttl_s, 0);
  assert_int_equal(cfg->response_cache.redis_timeout_ms, 250);
  assert_int_equal(cfg->pools[0].response_cache, 1);
  sip__config_free(cfg);
}

static void test_errors(void **state) {
  (void)state;
  EXPECT_ERR("server:\n  response_cache: {backend: disk}\n" POOL(""),
             "cfg.yaml:2:29: server.response_cache.backend", "expected one of memory, redis");
  EXPECT_ERR("server:\n  response_cache: {redis: {address: localhost}}\n" POOL(""),
             "server.response_cache.redis.address", "expected HOST:PORT");
  EXPECT_ERR("server:\n  response_cache: {redis: {address: \"h:70000\"}}\n" POOL(""),
             "server.response_cache.redis.address", "expected HOST:PORT");
  EXPECT_ERR("server:\n  response_cache: {redis: {address: \"::1:6379\"}}\n" POOL(""),
             "server.response_cache.redis.address", "IPv6 hosts in brackets");
  EXPECT_ERR("server:\n  response_cache: {redis: {timeout_ms: 0}}\n" POOL(""),
             "server.response_cache.redis.timeout_ms", "1..10000");
  EXPECT_ERR("server:\n  response_cache: {max_bytes: 10}\n" POOL(""),
             "server.response_cache.max_bytes");
  EXPECT_ERR("server:\n  response_cache: {size: 1}\n" POOL(""), "server.response_cache",
             "size");
  EXPECT_ERR(POOL("    response_cache: maybe\n"), "session_pools[0].response_cache",
             "true or false");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_every_key),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
