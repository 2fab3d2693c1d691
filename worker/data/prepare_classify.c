/* prepare_classify.c — `lstmd prepare classify`: a TSV of `label<TAB>text` lines → train.bin and
 * val.bin of classify records (dataset.h): byte-level text, labels mapped to ids in ascending byte
 * order. The lines are shuffled with a fixed seed before the split, so a file sorted by label
 * still gives a validation split with every class. Bad lines: a message naming file and line.
 * The label table, shuffle, split and writer are shared with --series (prepare_classify_series.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "kernels/utf8.h"
#include "dataset.h"
#include "prepare.h"

struct seq {
  char *text;  /* bytes of the sequence (not NUL-terminated data; len says) */
  size_t len;
  int label;   /* index into the label table while reading; final id after sorting */
};

struct tsv_state {
  const char *input;
  struct seq *seqs;
  size_t n, cap;
  struct lstmd_label_table labels;
  size_t max_len;
  const size_t *order;   /* writing: record i is seqs[order[i]] */
  const uint8_t *byte_id; /* writing: token id of each byte value */
};

_Static_assert(LSTMD_MAX_COLUMNS == 64 && LSTMD_MAX_NAME_BYTES == 64, "messages below say so");

int lstmd_label_table_id(struct lstmd_label_table *t, const char *label, size_t len,
                         const char **why) {
  *why = len == 0                              ? "empty label"
         : len >= LSTMD_MAX_NAME_BYTES         ? "label longer than 63 bytes"
         : memchr(label, '\0', len) != NULL    ? "NUL byte in the label"
                                               : NULL;
  if (*why) return -1;
  for (int k = 0; k < t->n; k++)
    if (strlen(t->names[k]) == len && !memcmp(t->names[k], label, len)) return k;
  if (t->n == LSTMD_MAX_COLUMNS) {
    *why = "more than 64 distinct labels";
    return -1;
  }
  memcpy(t->names[t->n], label, len);
  t->names[t->n][len] = '\0';
  if (!lstmd_utf8_valid(t->names[t->n])) { /* checkpoints keep the labels as JSON text */
    *why = "a label that is not UTF-8 text (save the file as UTF-8)";
    return -1;
  }
  return t->n++;
}

static int cmp_label(const void *a, const void *b) { return strcmp(a, b); }

void lstmd_label_table_sort(const struct lstmd_label_table *t, struct lstmd_dataset_info *info,
                            int *new_id) {
  memcpy(info->names, t->names, sizeof t->names);
  qsort(info->names, (size_t)t->n, LSTMD_MAX_NAME_BYTES, cmp_label);
  for (int k = 0; k < t->n; k++)
    for (int j = 0; j < t->n; j++)
      if (!strcmp(t->names[k], info->names[j])) new_id[k] = j;
  info->horizon = t->n;
}

int lstmd_classify_split(const char *input, size_t n, double val_fraction, size_t *train_n,
                         size_t *val_n) {
  *val_n = (size_t)(val_fraction * (double)n);
  *train_n = n - *val_n;
  if (*train_n > 0 && !(val_fraction > 0 && *val_n == 0)) return LSTMD_OK;
  lstmd_errorf("%s: %zu sequences give %zu for training and %zu for validation; need at least "
               "one in each%s", input, n, *train_n, *val_n,
               *val_n == 0 ? " (a larger --val-fraction, or --val-fraction 0 for no validation "
                             "split at all)" : " (more sequences, or a smaller --val-fraction)");
  return LSTMD_EFORMAT;
}

static int line_error(const struct tsv_state *st, long line, const char *what) {
  lstmd_errorf("%s:%ld: %s", st->input, line, what);
  return LSTMD_EFORMAT;
}

/* One line (without its '\n'; a trailing '\r' removed by the caller). */
static int add_line(struct tsv_state *st, long lineno, char *line, size_t n) {
  char *tab = memchr(line, '\t', n);
  if (n == 0) return line_error(st, lineno, "empty line (expected label<TAB>text)");
  if (!tab) return line_error(st, lineno, "no TAB (expected label<TAB>text)");
  size_t label_len = (size_t)(tab - line), text_len = n - label_len - 1;
  if (text_len == 0) return line_error(st, lineno, "empty text");
  if (text_len > LSTMD_MAX_SEQ_BYTES) {
    char msg[96];
    snprintf(msg, sizeof msg, "text of %zu bytes, at most %d", text_len, LSTMD_MAX_SEQ_BYTES);
    return line_error(st, lineno, msg);
  }
  const char *why;
  const int id = lstmd_label_table_id(&st->labels, line, label_len, &why);
  if (id < 0) return line_error(st, lineno, why);
  if (st->n == st->cap) {
    size_t cap = st->cap ? 2 * st->cap : 1024;
    struct seq *s = realloc(st->seqs, cap * sizeof *s);
    if (!s) return LSTMD_ENOMEM;
    st->seqs = s;
    st->cap = cap;
  }
  char *text = malloc(text_len);
  if (!text) return LSTMD_ENOMEM;
  memcpy(text, tab + 1, text_len);
  st->seqs[st->n++] = (struct seq){.text = text, .len = text_len, .label = id};
  if (text_len > st->max_len) st->max_len = text_len;
  return LSTMD_OK;
}

static int read_tsv(struct tsv_state *st) {
  FILE *f = fopen(st->input, "r");
  if (!f) {
    lstmd_errorf("%s: cannot open input: %s", st->input, strerror(errno));
    return LSTMD_EIO;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  long lineno = 0;
  int rc = LSTMD_OK;
  while (!rc && (n = getline(&line, &cap, f)) > 0) {
    lineno++;
    if (line[n - 1] == '\n') n--;
    if (n > 0 && line[n - 1] == '\r') n--;
    const size_t bom = lineno == 1 ? lstmd_utf8_bom_len(line, (size_t)n) : 0;
    rc = add_line(st, lineno, line + bom, (size_t)n - bom);
  }
  const int read_error = ferror(f) ? (errno ? errno : EIO) : 0; /* getline's: "Is a directory" */
  free(line);
  fclose(f);
  if (!rc && read_error) {
    lstmd_errorf("%s: read failed: %s", st->input, strerror(read_error));
    rc = LSTMD_EIO;
  }
  if (!rc && st->n == 0) {
    lstmd_errorf("%s: input is empty", st->input);
    rc = LSTMD_EFORMAT;
  }
  if (!rc && st->labels.n < 2) {
    lstmd_errorf("%s: one label only ('%s'); classification needs at least 2", st->input,
                 st->labels.names[0]);
    rc = LSTMD_EFORMAT;
  }
  return rc;
}

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void lstmd_classify_shuffle(size_t n, size_t *order) {
  for (size_t i = 0; i < n; i++) order[i] = i;
  /* Fisher-Yates with a fixed seed: the same file always gives the same split. */
  uint64_t seed = 0x6c73746d64636c66ull; /* "lstmdclf" */
  for (size_t s = n - 1; n > 0 && s > 0; s--) {
    size_t j = (size_t)(splitmix64(&seed) % (s + 1)), t = order[s];
    order[s] = order[j];
    order[j] = t;
  }
}

/* Writes records [first, first+n) into w (one record buffer, reused). */
static int append_records(struct lstmd_dataset_writer *w, size_t first, size_t n, uint8_t *rec,
                          lstmd_classify_record_fn fill, void *ctx) {
  for (size_t i = first; i < first + n; i++) {
    memset(rec, 0, lstmd_classify_record_bytes(&w->info));
    fill(ctx, i, rec);
    LSTMD_TRY(lstmd_dataset_writer_append(w, rec, 1));
  }
  return LSTMD_OK;
}

int lstmd_classify_write(const char *out_dir, const struct lstmd_dataset_info *info,
                         size_t train_n, size_t val_n, lstmd_classify_record_fn fill, void *ctx) {
  struct lstmd_dataset_writer train = {0}, val = {0};
  char path[4096];
  uint8_t *rec = malloc(lstmd_classify_record_bytes(info));
  if (!rec) return LSTMD_ENOMEM;
  int rc = lstmd_mkdir_output(out_dir);
  snprintf(path, sizeof path, "%s/train.bin", out_dir);
  if (!rc) rc = lstmd_dataset_writer_open(&train, path, info);
  snprintf(path, sizeof path, "%s/val.bin", out_dir);
  if (rc) {
    free(rec);
    return rc;
  }
  rc = lstmd_dataset_writer_open(&val, path, info);
  if (rc) {
    lstmd_dataset_writer_abort(&train);
    free(rec);
    return rc;
  }
  rc = append_records(&train, 0, train_n, rec, fill, ctx);
  if (!rc) rc = append_records(&val, train_n, val_n, rec, fill, ctx);
  uint64_t pair_id = (uint64_t)train.info.payload_crc32c << 32 | val.info.payload_crc32c;
  if (!rc) rc = lstmd_dataset_writer_finish(&train, pair_id);
  if (!rc) rc = lstmd_dataset_writer_finish(&val, pair_id);
  if (!rc) rc = lstmd_dataset_writer_commit(&val);
  if (!rc) rc = lstmd_dataset_writer_commit(&train);
  lstmd_dataset_writer_abort(&train);
  lstmd_dataset_writer_abort(&val);
  free(rec);
  return rc;
}

/* Record i of a text classify dataset: its label, length and token ids (lstmd_classify_write). */
static void fill_text_record(void *ctx, size_t i, uint8_t *rec) {
  const struct tsv_state *st = ctx;
  const struct seq *q = &st->seqs[st->order[i]];
  uint8_t *ids = lstmd_classify_record_put(rec, (uint32_t)q->label, (uint32_t)q->len);
  for (size_t k = 0; k < q->len; k++) ids[k] = st->byte_id[(uint8_t)q->text[k]];
}

int lstmd_prepare_classify(const char *input, const char *out_dir, double val_fraction) {
  struct tsv_state st = {.input = input};
  struct lstmd_dataset_info *info = calloc(1, sizeof *info);
  int rc = info ? read_tsv(&st) : LSTMD_ENOMEM;
  size_t train_n = 0, val_n = 0, *order = NULL;
  if (!rc) rc = lstmd_classify_split(input, st.n, val_fraction, &train_n, &val_n);
  if (!rc && !(order = malloc(st.n * sizeof *order))) rc = LSTMD_ENOMEM;
  uint8_t byte_id[256] = {0};
  if (!rc) {
    int new_id[LSTMD_MAX_COLUMNS] = {0}; /* label ids: the labels in ascending byte order */
    lstmd_label_table_sort(&st.labels, info, new_id);
    int seen[256] = {0};
    for (size_t s = 0; s < st.n; s++) {
      st.seqs[s].label = new_id[st.seqs[s].label];
      for (size_t i = 0; i < st.seqs[s].len; i++) seen[(uint8_t)st.seqs[s].text[i]] = 1;
    }
    info->kind = LSTMD_DATASET_CLASSIFY;
    info->width = (int)st.max_len;
    for (int b = 0; b < 256; b++)
      if (seen[b]) {
        byte_id[b] = (uint8_t)info->vocab_size;
        info->vocab[info->vocab_size++] = (uint8_t)b;
      }
    lstmd_classify_shuffle(st.n, order);
    st.order = order;
    st.byte_id = byte_id;
    rc = lstmd_classify_write(out_dir, info, train_n, val_n, fill_text_record, &st);
  }
  if (!rc)
    fprintf(stderr, "lstmd: prepared classify %s: %zu sequences, %d classes, %d distinct bytes, "
            "longest %zu bytes, train %zu, val %zu -> %s\n", input, st.n, st.labels.n,
            info->vocab_size, st.max_len, train_n, val_n, out_dir);
  for (size_t s = 0; s < st.n; s++) free(st.seqs[s].text);
  free(st.seqs);
  free(order);
  free(info);
  return rc;
}
