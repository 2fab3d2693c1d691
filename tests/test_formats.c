/* test_formats.c — file formats and config parsing: CRC-32C check value, the safetensors
 * reference test vector (exact bytes) and the reader's rejections, the dataset format round
 * trip and its corruption checks, the config table's errors, and predict's output rows
 * (formatted on two threads) against one fprintf per number, byte for byte. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/config.h"
#include "kernels/status.h"
#include "worker/io/checkpoint.h"
#include "worker/data/dataset.h"
#include "worker/io/safetensors.h"
#include "worker/io/tb_events.h"
#include "worker/model/forecast_rows.h"
#include "worker/train/dataset_fit.h"
#include "check.h"

static char g_dir[] = "/tmp/lstmd-test-formats-XXXXXX";

static char *path_in(const char *name) {
  static char buf[8][256];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, n, f);
  fclose(f);
}

static size_t read_bytes(const char *path, unsigned char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, cap, f) : 0;
  if (f) fclose(f);
  return n;
}

static void test_crc(void) {
  check_true("crc32c(\"123456789\") = e3069283", lstmd_crc32c(0, "123456789", 9) == 0xE3069283u);
  uint32_t part = lstmd_crc32c(0, "1234", 4);
  check_true("crc32c chains across calls", lstmd_crc32c(part, "56789", 5) == 0xE3069283u);
}

static void test_safetensors(void) {
  static const char want_hex[] =
      "3800000000000000"
      "7b2277223a7b226474797065223a22463332222c227368617065223a5b325d2c22646174615f6f666673657473"
      "223a5b302c385d7d7d2020"
      "0000803f00000040";
  unsigned char want[72], got[256];
  for (int i = 0; i < 72; i++) sscanf(want_hex + 2 * i, "%2hhx", &want[i]);
  float w[2] = {1.0f, 2.0f};
  struct lstmd_st_tensor t = {"w", w, 1, {2}};
  check_true("safetensors write", lstmd_st_write(path_in("w.st"), &t, 1, NULL, 0) == 0);
  size_t n = read_bytes(path_in("w.st"), got, sizeof got);
  check_true("safetensors reference vector, byte for byte", n == 72 && !memcmp(got, want, 72));

  struct lstmd_st_meta meta[] = {{"k", "v"}};
  float big[6] = {1, 2, 3, 4, 5, 6};
  struct lstmd_st_tensor two[] = {{"a", big, 2, {2, 3}}, {"b", w, 1, {2}}};
  lstmd_st_write(path_in("two.st"), two, 2, meta, 1);
  struct lstmd_st_file *f = NULL;
  float back[6] = {0};
  int64_t shape[2] = {2, 3}, wrong[2] = {3, 2};
  int ok = lstmd_st_open(path_in("two.st"), &f) == 0 && f &&
           lstmd_st_read_f32(f, "a", 2, shape, back) == 0 && !memcmp(back, big, sizeof big) &&
           lstmd_st_meta_get(f, "k") && !strcmp(lstmd_st_meta_get(f, "k"), "v");
  check_true("safetensors round trip with metadata", ok);
  check_true("safetensors shape mismatch rejected", f && lstmd_st_read_f32(f, "a", 2, wrong, back) != 0);
  check_true("safetensors missing tensor rejected", f && lstmd_st_read_f32(f, "zz", 1, shape, back) != 0);
  lstmd_st_close(f);

  /* Hostile files: each must be rejected without crashing. */
  n = read_bytes(path_in("two.st"), got, sizeof got);
  struct {
    const char *what;
    size_t len;
    int patch_at;
    char patch;
  } cases[] = {{"truncated data", n - 3, -1, 0},
               {"shorter than 8 bytes", 5, -1, 0},
               {"header not JSON", n, 9, '#'},
               {"header length huge", n, 5, 0x7f}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    unsigned char bad[256];
    memcpy(bad, got, n);
    if (cases[i].patch_at >= 0) bad[cases[i].patch_at] = (unsigned char)cases[i].patch;
    write_bytes(path_in("bad.st"), bad, cases[i].len);
    struct lstmd_st_file *g = NULL;
    char what[96];
    snprintf(what, sizeof what, "safetensors rejects: %s", cases[i].what);
    int rc = lstmd_st_open(path_in("bad.st"), &g);
    check_true(what, rc != 0 && g == NULL);
  }
  const char *gap = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
  unsigned char buf[128] = {0};
  size_t len = strlen(gap);
  buf[0] = (unsigned char)len;
  memcpy(buf + 8, gap, len);
  write_bytes(path_in("gap.st"), buf, 8 + len + 8);
  struct lstmd_st_file *g = NULL;
  check_true("safetensors rejects: gap before data", lstmd_st_open(path_in("gap.st"), &g) != 0);
  const char *dup = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  len = strlen(dup);
  memset(buf, 0, sizeof buf);
  buf[0] = (unsigned char)len;
  memcpy(buf + 8, dup, len);
  write_bytes(path_in("dup.st"), buf, 8 + len + 4);
  check_true("safetensors rejects: duplicate keys", lstmd_st_open(path_in("dup.st"), &g) != 0);
}

static void test_dataset(void) {
  struct lstmd_dataset_info info = {.kind = LSTMD_DATASET_SERIES, .width = 2, .horizon = 3};
  strcpy(info.names[0], "temp");
  strcpy(info.names[1], "wind");
  info.mean[0] = 10.0f;
  info.mean[1] = -1.0f;
  info.std[0] = 2.0f;
  info.std[1] = 0.5f;
  float rows[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  struct lstmd_dataset_writer w = {0};
  int rc = lstmd_dataset_writer_open(&w, path_in("s.bin"), &info);
  if (!rc) rc = lstmd_dataset_writer_append(&w, rows, 3);
  if (!rc) rc = lstmd_dataset_writer_append(&w, rows + 6, 2);
  if (!rc) rc = lstmd_dataset_writer_finish(&w, 42);
  if (!rc) rc = lstmd_dataset_writer_commit(&w);
  check_true("dataset write (streamed)", rc == 0);
  struct lstmd_dataset ds;
  float back[4];
  rc = lstmd_dataset_open(path_in("s.bin"), &ds);
  int ok = rc == 0 && lstmd_dataset_verify(&ds) == 0 && ds.info.count == 5 && ds.info.width == 2 &&
           ds.info.horizon == 3 && ds.info.pair_id == 42 && !strcmp(ds.info.names[1], "wind") &&
           ds.info.std[1] == 0.5f && lstmd_dataset_read(&ds, 3, 2, back) == 0 && back[0] == 7 &&
           back[3] == 10 && lstmd_dataset_read(&ds, 4, 2, back) != 0;
  check_true("dataset round trip and ranged reads", ok);
  if (rc == 0) lstmd_dataset_close(&ds);

  unsigned char file[512];
  size_t n = read_bytes(path_in("s.bin"), file, sizeof file);
  file[n - 1] ^= 0x40; /* payload bit flip */
  write_bytes(path_in("flip.bin"), file, n);
  rc = lstmd_dataset_open(path_in("flip.bin"), &ds);
  check_true("dataset: payload bit flip -> CRC error", rc == 0 && lstmd_dataset_verify(&ds) == LSTMD_ECRC);
  if (rc == 0) lstmd_dataset_close(&ds);
  file[n - 1] ^= 0x40;
  file[70] ^= 1; /* inside the column table */
  write_bytes(path_in("hdr.bin"), file, n);
  check_true("dataset: header bit flip rejected", lstmd_dataset_open(path_in("hdr.bin"), &ds) != 0);
  file[70] ^= 1;
  write_bytes(path_in("short.bin"), file, n - 4);
  check_true("dataset: truncated file rejected", lstmd_dataset_open(path_in("short.bin"), &ds) != 0);
  write_bytes(path_in("tiny.bin"), file, 10);
  check_true("dataset: 10-byte file rejected", lstmd_dataset_open(path_in("tiny.bin"), &ds) != 0);
  check_true("dataset: missing file rejected", lstmd_dataset_open(path_in("nope.bin"), &ds) != 0);
  struct stat st;
  char tmpname[300];
  snprintf(tmpname, sizeof tmpname, "%s.tmp.%d", path_in("s.bin"), (int)getpid());
  check_true("dataset: no temp file left behind", stat(tmpname, &st) != 0);
}

/* A checkpoint whose metadata promises more series columns than any dataset can have must be
 * refused before anything is sized from it (it once overflowed the column table). */
static void test_hostile_checkpoint(void) {
  static float zeros[4 * 2000];
  /* every tensor present with the shapes the metadata implies, so only the width can fail */
  struct lstmd_st_tensor t[] = {{"lstm.weight_ih_l0", zeros, 2, {4, 2000}},
                                {"lstm.weight_hh_l0", zeros, 2, {4, 1}},
                                {"lstm.bias_ih_l0", zeros, 1, {4}},
                                {"lstm.bias_hh_l0", zeros, 1, {4}},
                                {"head.weight", zeros, 2, {1, 1}},
                                {"head.bias", zeros, 1, {1}}};
  static char names[2000 * 8 + 2], ones[2000 * 4 + 2];
  char *p = names, *q = ones;
  *p++ = '[';
  *q++ = '[';
  for (int c = 0; c < 2000; c++) {
    p += sprintf(p, "%s\"c%d\"", c ? "," : "", c);
    q += sprintf(q, "%s1", c ? "," : "");
  }
  strcpy(p, "]");
  strcpy(q, "]");
  struct lstmd_st_meta meta[] = {
      {"format", "lstmd-checkpoint-1"}, {"model.kind", "series"}, {"model.vocab", "0"},
      {"model.embed", "0"},             {"model.width", "2000"},  {"model.hidden", "1"},
      {"model.layers", "1"},            {"model.horizon", "1"},   {"series.columns", names},
      {"series.mean", ones},            {"series.std", ones},     {"data.pair_id", "0"},
      {"data.seq_len", "4"},            {"data.batch", "1"}};
  lstmd_st_write(path_in("wide.st"), t, 6, meta, 14);
  struct lstmd_model *m = NULL;
  struct lstmd_data_meta d;
  int rc = lstmd_checkpoint_load_model(path_in("wide.st"), &m, &d);
  check_true("checkpoint with 2000 series columns refused", rc == LSTMD_EFORMAT && m == NULL);
}

/* The two TensorBoard records of REFERENCE.md §4 (computed with an independent script there). */
static void test_tensorboard_records(void) {
  static const char *want[2] = {
      "1800000000000000a37f4b220900000040fc54d9411a0d627261696e2e4576656e743a32eced8f9d",
      "1a00000000000000129bd82d0900006040fc54d941102a2a0d0a0b0a046c6f7373150000a03f3c889104"};
  uint8_t rec[2][128];
  size_t n[2];
  n[0] = lstmd_tb_encode_record(rec[0], sizeof rec[0], 1700000000.0, 0, "brain.Event:2", 0, NULL, NULL);
  const char *tag = "loss";
  const float value = 1.25f;
  n[1] = lstmd_tb_encode_record(rec[1], sizeof rec[1], 1700000001.5, 42, NULL, 1, &tag, &value);
  for (int k = 0; k < 2; k++) {
    char hex[300] = "";
    for (size_t i = 0; i < n[k]; i++) sprintf(hex + 2 * i, "%02x", rec[k][i]);
    check_true(k ? "tensorboard scalar record, byte for byte" : "tensorboard file_version record",
               !strcmp(hex, want[k]));
    if (strcmp(hex, want[k])) printf("  got  %s\n  want %s\n", hex, want[k]);
  }
  /* The SessionLog START record every run writes after file_version (tb_events.h), as
   * TensorBoard's own RecordWriter frames Event(wall_time=1700000002, step=43,
   * session_log=SessionLog(status=START)). */
  const char *start = "0f000000000000006d532b090900008040fc54d941102b3a020801c5769887";
  size_t ns = lstmd_tb_encode_session_start(rec[0], sizeof rec[0], 1700000002.0, 43);
  char hex[300] = "";
  for (size_t i = 0; i < ns; i++) sprintf(hex + 2 * i, "%02x", rec[0][i]);
  check_true("tensorboard session START record, byte for byte", !strcmp(hex, start));
  if (strcmp(hex, start)) printf("  got  %s\n  want %s\n", hex, start);
}

/* Two event files opened by one process in one run dir within a second (lstmd serve's rank 0: a
 * job preempted and resumed in the second it started) must not share a name: the second used to
 * empty the first ("wb"). The names this second and the next would give are taken by sentinel
 * files first, so the clash is certain whenever the open happens; they must stay untouched and
 * the new file must be another one, holding the file_version and START records. */
static void test_tensorboard_no_clobber(void) {
  char dir[300], host[256] = "host", name[2][1200];
  snprintf(dir, sizeof dir, "%s/tb", g_dir);
  mkdir(dir, 0755);
  gethostname(host, sizeof host - 1);
  const long now = (long)time(NULL);
  for (int k = 0; k < 2; k++) {
    snprintf(name[k], sizeof name[k], "%s/events.out.tfevents.%010ld.%s.%d", dir, now + k, host,
             (int)getpid());
    write_bytes(name[k], "sentinel", 8);
  }
  struct lstmd_tb tb;
  int rc = lstmd_tb_open(&tb, dir, 7);
  lstmd_tb_close(&tb);
  unsigned char buf[256];
  int kept = 1;
  for (int k = 0; k < 2; k++)
    kept &= read_bytes(name[k], buf, sizeof buf) == 8 && !memcmp(buf, "sentinel", 8);
  size_t n = 0; /* the open's second is this one or, rarely, the next */
  for (int k = 0; k < 2 && n == 0; k++) {
    char suffixed[sizeof name[0] + 8];
    snprintf(suffixed, sizeof suffixed, "%.1190s.1", name[k]);
    n = read_bytes(suffixed, buf, sizeof buf);
  }
  check_true("tensorboard: an event file name already taken is left alone (the new one gets .1)",
             rc == 0 && kept && n > 40);
  if (!kept) printf("  an existing event file of the same second, host and pid was overwritten\n");
}

static void test_config(void) {
  struct lstmd_train_config c;
  lstmd_config_defaults(&c);
  check_true("config defaults", c.seq_len == 128 && c.hidden == 256 && c.optim.algo == 0 &&
                                     c.optim.lr > 0.0019f && c.optim.lr < 0.0021f);
  check_true("--set valid", lstmd_config_set(&c, "model.layers=3") == 0 && c.layers == 3);
  check_true("--set enum", lstmd_config_set(&c, "data.order=stream") == 0 && c.order == 1);
  check_true("--set out of range rejected, not clamped",
             lstmd_config_set(&c, "model.layers=0") != 0 && c.layers == 3);
  check_true("--set unknown key rejected", lstmd_config_set(&c, "model.colour=red") != 0);
  check_true("--set non-numeric rejected", lstmd_config_set(&c, "optim.lr=fast") != 0);
  check_true("--set trailing junk rejected", lstmd_config_set(&c, "train.steps=10x") != 0);
  check_true("--set bad enum rejected", lstmd_config_set(&c, "optim.algo=adam") != 0);
  check_true("--set missing '=' rejected", lstmd_config_set(&c, "train.steps") != 0);
  const char *ini = "[data]\npath = /x\nseq_len = 64   # inline comment\n[train]\nsteps = 5 ; too\n";
  write_bytes(path_in("ok.ini"), ini, strlen(ini));
  check_true("ini file", lstmd_config_load_ini(&c, path_in("ok.ini")) == 0 && c.seq_len == 64 &&
                             c.steps == 5 && !strcmp(c.data_path, "/x"));
  /* quoted values keep their spaces and a ' #', with \n, \t, \" and \\ escapes */
  const char *quoted = "[train]\nsample_prime = \"def \"  # a comment\n[distill]\nteacher = "
                       "\"a #b\\n\\t\\\"\\\\\"\n";
  write_bytes(path_in("quoted.ini"), quoted, strlen(quoted));
  check_true("ini quoted values", lstmd_config_load_ini(&c, path_in("quoted.ini")) == 0 &&
                                      !strcmp(c.sample_prime, "def ") &&
                                      !strcmp(c.distill_teacher, "a #b\n\t\"\\"));
  { /* and the effective-config dump writes them back in that form */
    char *dump = NULL;
    size_t dump_len = 0;
    FILE *mem = open_memstream(&dump, &dump_len);
    if (mem) lstmd_config_print(&c, mem);
    if (mem) fclose(mem);
    check_true("dump quotes what needs it",
               dump && strstr(dump, "  train.sample_prime = \"def \"\n") &&
                   strstr(dump, "  distill.teacher = \"a #b\\n\\t\\\"\\\\\"\n") &&
                   strstr(dump, "  train.run_dir = runs/default\n"));
    free(dump);
  }
  static const char *const kBadQuotes[] = {"[train]\nsample_prime = \"open\n",
                                          "[train]\nsample_prime = \"a\" b\n",
                                          "[train]\nsample_prime = \"\\q\"\n"};
  for (int i = 0; i < 3; i++) {
    write_bytes(path_in("badq.ini"), kBadQuotes[i], strlen(kBadQuotes[i]));
    check_true("ini malformed quoted value rejected", lstmd_config_load_ini(&c, path_in("badq.ini")) != 0);
  }
  memset(c.distill_teacher, 0, sizeof c.distill_teacher); /* bytes past the NUL too: memcmp below */
  const char *bad = "[data]\nseq_len = 64\n[model]\nwidth = 3\n";
  write_bytes(path_in("bad.ini"), bad, strlen(bad));
  check_true("ini unknown key rejected", lstmd_config_load_ini(&c, path_in("bad.ini")) != 0);
  check_true("ini missing file rejected", lstmd_config_load_ini(&c, path_in("none.ini")) != 0);
  char *json = lstmd_config_to_json(&c);
  struct lstmd_train_config d;
  lstmd_config_defaults(&d);
  check_true("config JSON round trip",
             json && lstmd_config_load_json(&d, json) == 0 && !memcmp(&c, &d, sizeof c));
  free(json);
}

/* lstmd_forecast_rows_write == fprintf("%zu") and fprintf(",%.9g") per number, for a chunk
 * small enough for one thread and one split over two (odd, so the halves differ; its row indices
 * go from 6 to 7 digits at the second half's first row), with values
 * that print in every form: integers, long fractions, exponents both ways, ±0, subnormals,
 * the largest float, ±inf and NaN. */
static void test_forecast_rows(void) {
  static const float special[] = {0.0f, -0.0f, 1.0f, -2.5f, 123456789.0f, 1e-5f, 3.4028235e38f,
                                  1.4e-45f, 1.17549435e-38f, 0.1f, 1e9f, 1e-4f, 65.25f};
  for (int pass = 0; pass < 2; pass++) {
    const size_t n = pass ? 1001 : 7;
    const int cols = pass ? 24 : 3;
    const size_t first = pass ? 999500 : 7;
    float *vals = malloc(n * cols * sizeof *vals);
    unsigned long long seed = 5;
    for (size_t r = 0; r < n; r++) {
      for (int c = 0; c < cols; c++) {
        const size_t k = r * cols + c;
        vals[k] = k % 5 ? (float)(test_uniform(&seed, 1.0) * pow(10.0, (double)(k % 13) - 6))
                        : special[(k / 5) % 13];
      }
    }
    vals[3] = INFINITY;
    vals[4] = -INFINITY;
    vals[5] = NAN;
    char *got = NULL, *want = NULL;
    size_t got_len = 0, want_len = 0;
    FILE *g = open_memstream(&got, &got_len), *w = open_memstream(&want, &want_len);
    const int rc = lstmd_forecast_rows_write(g, first, vals, n, cols);
    for (size_t r = 0; r < n; r++) {
      fprintf(w, "%zu", first + r);
      for (int c = 0; c < cols; c++) fprintf(w, ",%.9g", vals[r * cols + c]);
      fputc('\n', w);
    }
    fclose(g);
    fclose(w);
    char what[96];
    snprintf(what, sizeof what, "forecast rows (%zu rows, %d values): the bytes of fprintf", n,
             cols);
    check_true(what, rc == 0 && got_len == want_len && !memcmp(got, want, want_len));
    free(got);
    free(want);
    free(vals);
  }
}

/* lstmd_dataset_fit on a dataset prepared before lstmd prepare refused names that are not UTF-8:
 * a series column or classify label so named is refused (checkpoints keep the names as JSON
 * text, which dropped them), naming which; UTF-8 names (é as 0xc3 0xa9) pass. */
static void test_dataset_names(void) {
  struct lstmd_train_config cfg;
  lstmd_config_defaults(&cfg);
  struct lstmd_dataset_info info = {.kind = LSTMD_DATASET_SERIES, .width = 2, .horizon = 1};
  snprintf(info.names[0], sizeof info.names[0], "load");
  snprintf(info.names[1], sizeof info.names[1], "t\xc3\xa9mp");
  char why[512] = "";
  check_true("dataset fit: UTF-8 column names pass",
             lstmd_dataset_fit(&cfg, &info, "ds", why, sizeof why) == LSTMD_OK);
  snprintf(info.names[1], sizeof info.names[1], "t\xe9mp");
  check_true("dataset fit: a Latin-1 column name is refused, naming column 2",
             lstmd_dataset_fit(&cfg, &info, "ds", why, sizeof why) == LSTMD_ECONFIG &&
                 strstr(why, "data.path: ds: the name of column 2 is not UTF-8 text"));
  info = (struct lstmd_dataset_info){.kind = LSTMD_DATASET_CLASSIFY, .width = 8, .horizon = 2,
                                     .vocab_size = 2};
  snprintf(info.names[0], sizeof info.names[0], "caf\xe9");
  snprintf(info.names[1], sizeof info.names[1], "bar");
  check_true("dataset fit: a Latin-1 classify label is refused, naming label 1",
             lstmd_dataset_fit(&cfg, &info, "ds", why, sizeof why) == LSTMD_ECONFIG &&
                 strstr(why, "the name of label 1 is not UTF-8 text"));
}

int main(void) {
  if (!mkdtemp(g_dir)) return 2;
  test_dataset_names();
  test_forecast_rows();
  test_crc();
  test_safetensors();
  test_dataset();
  test_hostile_checkpoint();
  test_tensorboard_records();
  test_tensorboard_no_clobber();
  test_config();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) return 2;
  return check_summary("test_formats");
}
