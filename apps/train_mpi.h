/* relcl-train across processes and nodes with MPI (data parallelism), behind a narrow
 * interface that relcl-train.c calls at a few points.
 *
 * Each rank (one per device) computes the gradients of its share of an update's micro-batches;
 * the gradient of the update is the sum of the micro-batches' gradients taken in the order of
 * their global index (micro-batch 0, 1, 2, ... of the update), whatever rank computed them.
 * The sum runs on host buffers along a fixed chain of ranks (0 -> 1 -> ... -> N-1, send/recv),
 * never in the order MPI_Allreduce would pick, and the last rank broadcasts it. So N ranks with
 * --accum A compute bit for bit what one rank with --accum N*A does under MPI, and how the
 * micro-batches are shared out (--balance) cannot change the result.
 *
 * Without MPI at build time (meson -Dmpi=disabled, or no MPI found) the same functions exist:
 * train_mpi_active() is false and relcl-train is one process; train_mpi_init refuses to run
 * when the environment says mpirun started more than one rank.
 *
 * Only active when the environment shows an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or
 * PMIX_RANK): a plain `relcl-train` never initializes MPI, and accumulates on the device.
 */
#ifndef RELCL_TRAIN_MPI_H
#define RELCL_TRAIN_MPI_H

#include "relcl_model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Start MPI when launched by mpirun. 0, or 1 after one line on stderr. */
int train_mpi_init(int *argc, char ***argv);
/* End MPI. A failure that not every rank knows of (rc != 0 and not together) aborts the whole
 * job, so no rank is left waiting for a dead partner. */
void train_mpi_finalize(int rc, bool together);

bool train_mpi_active(void);
int train_mpi_rank(void); /* 0 when not active */
int train_mpi_size(void); /* 1 when not active */
/* "rank R on HOST: " for messages when several ranks run, else "". */
const char *train_mpi_where(void);

/* The device this rank opens: `device` when given, else the entry of the comma-separated
 * `device_map` chosen by the rank's local rank on its host (modulo its length), else NULL
 * (RELCL_DEVICE or the default). Returns NULL and fills err for a bad map. */
const char *train_mpi_device(const char *device, const char *device_map, char *buf, size_t size,
                             bool *bad, char *err, size_t errsize);

/* ---- agreement before training ---- */

/* FNV-1a 64 of a file's bytes, or of a string; 0 for a file that cannot be read. */
uint64_t train_mpi_hash_file(const char *path);
uint64_t train_mpi_hash_str(const char *s);
/* Every rank gives the same n named hashes; a rank whose hash differs from rank 0's makes
 * rank 0 print one line naming that rank, its host and `names[i]`. 0 when all agree; 1 on
 * every rank otherwise (the failure is then known together). */
int train_mpi_agree(const char *const *names, const uint64_t *hashes, int n);
/* Rank 0's bytes to every rank: on rank 0 *buf and *size are read, elsewhere they receive a
 * malloc'd copy. 0, or 1 when out of memory. */
int train_mpi_bcast_bytes(void **buf, size_t *size);
/* Rank 0's parameters and both Adam moments into every rank's model. */
relcl_status train_mpi_sync_params(relcl_model *model);

/* ---- one update ---- */

/* Root's stop reasons (time up, early stopping) reach every rank, a signal on any rank
 * reaches all: every rank leaves the loop at the same step. */
void train_mpi_agree_stop(bool *timeup, bool *early, bool *signaled);
/* This rank's micro-batches of update `step`: [*first, *first + *count) of the returned
 * total (size * accum). With balance, from the measured speed of every rank. */
int train_mpi_share(int accum, bool balance, uint64_t step, int *first, int *count);
/* After each of this rank's micro-batches (trained with stats *sm from zero): take its
 * gradient off the device (and zero the device's) and its statistics (zeroing *sm). */
relcl_status train_mpi_micro_done(relcl_model *model, relcl_model_stats *sm);
/* The update's gradient summed in micro-batch order, written into every rank's gradient
 * arena; *s receives the summed statistics. */
relcl_status train_mpi_reduce(relcl_model *model, relcl_model_stats *s);
/* Every `every` steps: compare a hash of the parameters across ranks; on a mismatch, say so
 * (rank 0) and give every rank rank 0's parameters and Adam moments. */
relcl_status train_mpi_check_params(relcl_model *model, uint64_t step, int64_t every);
/* Rank 0: one line per rank naming its host and device (a collective call). */
void train_mpi_describe(const char *device);
/* Rank 0: one line about the ranks since the last call (shares, MPI wait per step, scaling
 * efficiency). */
void train_mpi_log(uint64_t step);

#endif
