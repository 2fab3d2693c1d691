/* forecast_rows.h — predict's output rows ("index,v1,v2,...") written from a matrix of values,
 * formatted on two threads. */
#ifndef LSTMD_FORECAST_ROWS_H
#define LSTMD_FORECAST_ROWS_H

#include <stddef.h>
#include <stdio.h>

/* Writes rows [0, n): "first + r,vals[r·cols],...,vals[r·cols + cols − 1]\n", each value as
 * "%.9g" of the float: byte for byte one fprintf per number, in row order. 0, LSTMD_ENOMEM
 * (nothing written) or LSTMD_EIO. */
int lstmd_forecast_rows_write(FILE *out, size_t first, const float *vals, size_t n, int cols);

#endif
