/* safetensors.h — writing and reading safetensors files (8-byte LE header length, JSON header,
 * tensor bytes). F32 and I8 tensors are produced; reading validates the layout as the
 * reference implementation does (contiguous, no gaps or overlaps, sizes match shapes). */
#ifndef LSTMD_SAFETENSORS_H
#define LSTMD_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define LSTMD_ST_MAX_RANK 4

struct lstmd_st_tensor {
  const char *name;
  const void *data;    /* row-major, of dtype */
  int rank;
  int64_t shape[LSTMD_ST_MAX_RANK];
  const char *dtype;   /* "F32" (also when NULL) or "I8" */
};

struct lstmd_st_meta {
  const char *key, *value;
};

/* Writes the tensors (in the given order: put F32 before I8 so every tensor is aligned) and string metadata atomically to `path`. */
int lstmd_st_write(const char *path, const struct lstmd_st_tensor *tensors, int n_tensors,
                   const struct lstmd_st_meta *meta, int n_meta);

struct lstmd_st_file; /* an open, validated file; opaque */

/* Opens and validates. Every failure prints a message naming the file. */
int lstmd_st_open(const char *path, struct lstmd_st_file **out);
void lstmd_st_close(struct lstmd_st_file *f);
/* Metadata value for key, or NULL. Owned by f. */
const char *lstmd_st_meta_get(const struct lstmd_st_file *f, const char *key);
/* Whether tensor `name` is in the file (no message). */
int lstmd_st_has(const struct lstmd_st_file *f, const char *name);
/* dtype, rank and shape (LSTMD_ST_MAX_RANK entries) of tensor `name`: LSTMD_OK, or
 * LSTMD_EFORMAT with a message naming the file and the tensor when there is none. */
int lstmd_st_info(const struct lstmd_st_file *f, const char *name, const char **dtype, int *rank,
                  int64_t *shape);
/* Checks that tensor `name` exists with this dtype ("F32", "I8") and exactly this shape, reading
 * no data; reads it into out (elements of the dtype). LSTMD_EFORMAT with a message naming the
 * file and the tensor otherwise. */
int lstmd_st_check(const struct lstmd_st_file *f, const char *name, const char *dtype, int rank,
                   const int64_t *shape);
int lstmd_st_read(const struct lstmd_st_file *f, const char *name, const char *dtype, int rank,
                  const int64_t *shape, void *out);
/* Reads tensor `name` into out after checking dtype F32 and the exact shape (rank, dims).
 * Returns LSTMD_EFORMAT with a message on any mismatch or if the tensor is missing. */
int lstmd_st_read_f32(const struct lstmd_st_file *f, const char *name, int rank,
                      const int64_t *shape, float *out);
/* Checks that tensor `name` exists with dtype F32 and exactly this shape, reading no data.
 * Returns LSTMD_EFORMAT with a message naming the file otherwise. */
int lstmd_st_check_f32(const struct lstmd_st_file *f, const char *name, int rank,
                       const int64_t *shape);

#endif
