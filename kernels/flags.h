/* The flag bits relcl's host code passes to its kernels (an int argument named flags), and
 * the few sizes both sides must agree on: the one definition both sides use: lib/ includes this file, and the build embeds it at the
 * head of every program's source (before common.cl), so a bit cannot mean one thing in C and
 * another in OpenCL C. Plain #defines only: it must be valid C11 and OpenCL C 1.2. Bits
 * belong to one kernel family each; families may reuse values. */
#ifndef RELCL_KERNEL_FLAGS_H
#define RELCL_KERNEL_FLAGS_H

/* attention.cl: the row kernels of relcl_attn_forward / _backward */
#define RELCL_GATHER 1   /* add P (forward) or G (backward) at each key's label */
#define RELCL_BUCKET 2   /* write the label sums of the row's result */
#define RELCL_CAUSAL 4   /* mask keys after the query's position */
#define RELCL_KEY_LEN 8  /* mask keys j >= key_len[b] */
#define RELCL_DROPOUT 16 /* dropout on the attention weights */
#define RELCL_WRITE_A 32 /* attn_drop_rows: write the dropped weights */
#define RELCL_SAVED 64   /* attn_bwd_cpu: alpha' and its label sums are the forward's */

/* decode.cl: attn_step, the decoder's one-step attention over the caches */
#define RELCL_STEP_REL_K 1    /* add q . wK[r] to the logits */
#define RELCL_STEP_REL_V 2    /* add wV[r] to the values */
#define RELCL_STEP_PER_HEAD 4 /* one (2k+1, dh) table per head */
#define RELCL_STEP_CAUSAL 8   /* keys after the query's position are masked */
#define RELCL_STEP_KEY_LEN 16 /* keys j >= key_len[b] are masked */

/* layers.cl */
#define RELCL_ACCUMULATE 1 /* y += result instead of y = result */
#define RELCL_RESIDUAL 2   /* dropout: add a residual */
#define RELCL_DROP 4       /* dropout: p > 0 */
#define RELCL_RELU 8       /* bias_add: then max(., 0) */
#define RELCL_BIAS 16      /* dropout: add a bias by column first */
#define RELCL_KEEP_SAVE 32 /* dropout_apply (item shape): write the keep bits */
#define RELCL_KEEP_LOAD 64 /* dropout_apply (item shape): read them instead of Philox's */
#define RELCL_DROP_DX 128  /* ln_bwd_params: also dropout's backward of dx, by the keep bits */
#define RELCL_DROP_SUM 256 /* ln_bwd_params: and the column sums of that */

/* gemm.cl gemm_cpu: what its store does to alpha op(A) op(B) + beta C (gemm.c's epilogues) */
#define RELCL_GEMM_RELU_BWD 1 /* 0 where M, ReLU's output with C's shape, is not above 0 */
#define RELCL_GEMM_BIAS 2     /* add the row M (a bias by column), as bias_add does */
#define RELCL_GEMM_RELU 4     /* then max(., 0), as bias_add's RELCL_RELU */

/* loss.cl */
#define RELCL_WRITE_GRAD 1 /* xent_rows: write the gradient of the logits */

/* optim.cl */
#define RELCL_SQUARE 1 /* sum_block: square the inputs */
#define RELCL_CLIP 1   /* adam: clip by the global norm in sumsq[0] */

/* Sizes both sides must agree on */
#define RELCL_TOPK_MAX 32 /* decode.cl row_topk: candidates a row at most (its arrays) */
/* layers.cl colsum_partial, ln_param_partial in the item shape (common.cl): adjacent columns
 * one work-item sums as one vector (an OpenCL vector width: 2, 4, 8 or 16) */
#define RELCL_COL_VEC 8
/* ... and colsum_partial, ln_param_partial: such vectors a work-item, summed as independent
 * chains */
#define RELCL_COL_RUNS 4
/* gemm.cl gemm_cpu with vectors of W floats (RELCL_CPU_VEC, a build option): rows of C a
 * work-item; its columns are 2 W (gemm.c sizes the grid) */
#define RELCL_CPU_MR(W) ((W) >= 16 ? 8 : 6)
/* gemm.cl gemm_cpu_bt: the longest sum it takes (its local copy of B is this x 2 W floats) */
#define RELCL_CPU_BT_KMAX 128
/* gemm.cl's gemm_cpu_at: the longest slice of a weight gradient's sum (its local copy of A) */
#define RELCL_CPU_AT_K 768
/* W itself comes as a build option (lib/runtime/program.c: the device's native float vector
 * width, 16, 8 or 4); 16 where none is given */
#ifndef RELCL_CPU_VEC
#define RELCL_CPU_VEC 16
#endif
/* layers.cl dropout_apply in the item shape: runs of eight Philox calls (32 elements) a
 * work-item, their rounds interleaved (common.cl relcl_philox8_runs) */
#define RELCL_DROP_RUNS 4
/* common.cl RELCL_FOR_ELEMENTS in the item shape: elements a work-item */
#define RELCL_ELEM_RUN 64
/* util.cl fill in the item shape: elements a work-item (a multiple of 16: whole vectors) */
#define RELCL_FILL_RUN 1024

#endif
