/* Every op of relcl_layers.h against the plain-C reference (test/ref/ref_layers.c), over one
 * table of cases with the edge shapes (one row, widths that are not multiples of 4 or that
 * exceed a work-group, row counts around the 64-row chunks of the column sums), plus bitwise
 * repeatability of every op and the argument errors.
 *
 * Tolerances, relative to max(largest reference entry, floor):
 *  - exact (0): dropout, ReLU, residual add, the fused bias + dropout + residual of the
 *    model's residual blocks, head split/merge, argmax, and the embedding
 *    forward: one float operation per element, or a copy, so any difference is a bug; and
 *    the embedding gradient against the float reference that sums in relcl's documented order.
 *  - 2e-5: sums of up to ~10^3 float products (layer norm, linear, column sums, sum of
 *    squares, loss): float32 rounding grows like sqrt(n) * 6e-8 ~ 2e-6; exp/log add <= 4 ulp.
 *  - 1e-4: layer norm's backward, whose (g - mean g - xhat mean(g xhat)) cancels, and the
 *    embedding gradient against the double reference (positions summed in float).
 *  - Adam: m and v 1e-5 (a few float operations); the parameter step relative to lr 1e-4
 *    (rounding of the parameter itself, 6e-8 |p| / lr with |p| <= 1, lr = 1e-2, is 6e-6).
 * A wrong index, mask, scale or order changes entries by O(1) relative: far above these.
 */
#include "ref/ref.h"
#include "ref/ref_layers.h"
#include "ops.h" /* the fused ops the model's graph calls (not public) */
#include "runtime.h" /* relcl__transpose (not public) */
#include "relcl_layers.h"
#include "testutil.h"

typedef enum {
  OP_LAYERNORM,
  OP_EMBEDDING,
  OP_DROPOUT,
  OP_LINEAR,
  OP_ELEMENTWISE, /* relu, residual add, axpby */
  OP_FUSED,       /* the graph's fused ops: bias + dropout + residual, linear + ReLU */
  OP_HEADS,
  OP_COLSUM,
  OP_SUMSQ,
  OP_XENT,
  OP_ARGMAX,
  OP_ADAM,
  OP_TRANSPOSE, /* gemm.c's operand transpose (relcl__transpose, kernels/util.cl) */
  OP_BATCHED,   /* gemm.c's batched products (attention's per-head ones) */
  OP_RELU_LINEAR, /* a linear layer's backward after a ReLU (the feed-forward's second) */
  OP_LINEAR_HEADS, /* a linear layer's output, or input gradient, in the heads layout */
  OP_FILL,         /* relcl_fill */
  OP_FFN_LD,       /* the feed-forward with its hidden's rows padded (relcl__act_ld) */
} op_kind;

/* a, b, c: the op's sizes (see each check_*); f: eps, p, or lr; flag: the op's variant. */
typedef struct layer_case {
  op_kind op;
  const char *name;
  int a, b, c;
  float f;
  int flag;
} layer_case;

static const layer_case cases[] = {
    /* layer norm: a rows, b d, flag 1 = accumulate dx */
    {OP_LAYERNORM, "ln rows=1 d=8", 1, 8, 0, 1e-5f, 0},
    {OP_LAYERNORM, "ln d=1", 3, 1, 0, 1e-5f, 0},
    {OP_LAYERNORM, "ln d=5", 7, 5, 0, 1e-5f, 1},
    {OP_LAYERNORM, "ln d=13 rows=65", 65, 13, 0, 1e-5f, 0},
    {OP_LAYERNORM, "ln d=50 rows=70", 70, 50, 0, 1e-5f, 1},
    {OP_LAYERNORM, "ln d=128 rows=130", 130, 128, 0, 1e-5f, 1},
    {OP_LAYERNORM, "ln d=96 rows=9", 9, 96, 0, 1e-5f, 0},
    {OP_LAYERNORM, "ln d=700 (> work-group)", 3, 700, 0, 1e-6f, 0},
    /* embedding: a n, b d, c vocab; flag 1 = heavy repeats, 2 = out-of-range ids too */
    {OP_EMBEDDING, "emb n=1", 1, 8, 11, 0, 0},
    {OP_EMBEDDING, "emb d=5", 9, 5, 11, 0, 0},
    {OP_EMBEDDING, "emb repeated tokens", 300, 16, 7, 0, 1},
    {OP_EMBEDDING, "emb all one token", 257, 3, 5, 0, 3},
    {OP_EMBEDDING, "emb out-of-range ids", 40, 8, 13, 0, 2},
    /* d past a vector of 16 and not a multiple of it (the item shape's backward: vectors of
     * 16 columns, then one by one), repeated tokens */
    {OP_EMBEDDING, "emb d=37 repeated tokens", 50, 37, 20, 0, 1},
    /* whole words of keep bits a row (the dropout in the lookup's launch): four words and
     * one, then two */
    {OP_EMBEDDING, "emb d=160", 7, 160, 9, 0, 0},
    {OP_EMBEDDING, "emb d=64 out-of-range ids", 40, 64, 13, 0, 2},
    /* dropout: a n, f p, flag 1 = residual, 2 = backward accumulates */
    {OP_DROPOUT, "dropout p=0", 1000, 0, 0, 0.0f, 0},
    {OP_DROPOUT, "dropout n=1", 1, 0, 0, 0.1f, 1},
    {OP_DROPOUT, "dropout p=0.1 residual", 10007, 0, 0, 0.1f, 1},
    {OP_DROPOUT, "dropout p=0.5 acc", 5003, 0, 0, 0.5f, 2},
    {OP_DROPOUT, "dropout p=0.9", 20000, 0, 0, 0.9f, 3},
    /* keep bits (a word a run of 32, four runs a work-item): a partial second word, a second
     * work-item of one element, whole words only */
    {OP_DROPOUT, "dropout n=33 p=0.3", 33, 0, 0, 0.3f, 0},
    {OP_DROPOUT, "dropout n=129 residual", 129, 0, 0, 0.2f, 1},
    {OP_DROPOUT, "dropout n=256 acc", 256, 0, 0, 0.5f, 2},
    /* linear: a rows, b in, c out; flag 1 = bias, 2 = accumulate dx */
    {OP_LINEAR, "linear rows=1", 1, 5, 7, 0, 1},
    {OP_LINEAR, "linear no bias", 9, 8, 4, 0, 0},
    {OP_LINEAR, "linear 130x33x17 acc", 130, 33, 17, 0, 3},
    {OP_LINEAR, "linear 64x128x384", 64, 128, 384, 0, 1},
    /* the bias gradient from the weight gradient's transposed copy of dy (gemm.c: on a CPU
     * with a sum over 64 rows and 256 columns or more; with AVX-512 only where dy's rows are
     * 1024 floats or more): one output, a last block of 6 rows; 40 outputs, a last block of
     * 8 columns and 13 rows; 1040 outputs */
    {OP_LINEAR, "linear 70x256x1", 70, 256, 1, 0, 1},
    {OP_LINEAR, "linear 1037x256x40 acc", 1037, 256, 40, 0, 3},
    {OP_LINEAR, "linear 300x256x1040", 300, 256, 1040, 0, 1},
    /* x's rows over 256 floats, which gemm_cpu_at reads in place since session 37 (AVX-512):
     * 400 (a last block of 16 columns) and 512, C's rows in blocks of 32 with a last of 12,
     * sums in slices of 512 with a last of 13 and of 288 */
    {OP_LINEAR, "linear 1037x400x300 acc", 1037, 400, 300, 0, 3},
    {OP_LINEAR, "linear 800x512x64", 800, 512, 64, 0, 1},
    /* x's rows over 512 floats, dy's 512 or fewer: C^T in gemm_cpu_at (gemm.c), C
     * transposed in (dW accumulates) and out, the bias gradient from column_sums: 1040
     * columns (a last block of 16), 300 rows of dW (a last block of 12), slices of 512 with a
     * last of 13 */
    {OP_LINEAR, "linear 1037x1040x300 acc", 1037, 1040, 300, 0, 3},
    /* rows over 16 tiles of CLBlast's kernel and not a whole number of them: one product for
     * the whole tiles and one for the rest (lib/runtime/gemm.c) under a tuning that gives
     * the tile; the weight gradient's 1037 rows in K_CHUNK slices of 384 */
    {OP_LINEAR, "linear 1037x64x40 acc", 1037, 64, 40, 0, 3},
    /* sizes in whole tiles of the shipped Zen 1 tuning (NWG, MWG 32, KWG 128): on a CPU the
     * forward's x and W and the input gradient's dy go through relcl's transpose kernel
     * before CLBlast (gemm.c own_transpose), the whole tiles' 1024 rows here, and the
     * input gradient's dy as two K_CHUNK slices of 512 of its 1024 columns below */
    {OP_LINEAR, "linear 1037x128x128 acc", 1037, 128, 128, 0, 3},
    {OP_LINEAR, "linear 544x64x1024", 544, 64, 1024, 0, 1},
    /* the output in the heads layout (relcl__linear_forward_heads, the attention's
     * projections) and the input gradient (relcl__linear_backward_heads, the output
     * projection's): a the index in split_cases below */
    {OP_LINEAR_HEADS, "split dh 16", 0, 0, 0, 0, 0},
    {OP_LINEAR_HEADS, "split q|k|v dh 64", 1, 0, 0, 0, 0},
    {OP_LINEAR_HEADS, "split dh 12", 2, 0, 0, 0, 0},
    {OP_LINEAR_HEADS, "split dh 32", 3, 0, 0, 0, 0},
    {OP_LINEAR_HEADS, "split 1 sequence", 4, 0, 0, 0, 0},
    /* relcl_fill: a n, b the offset; in the item shape (CPUs) runs of 1024 elements a
     * work-item (flags.h RELCL_FILL_RUN) in whole vectors, a shorter last run one by one */
    {OP_FILL, "fill 1", 1, 0, 0, 0, 0},
    {OP_FILL, "fill 15 at 3", 15, 3, 0, 0, 0},
    {OP_FILL, "fill 1024", 1024, 0, 0, 0, 0},
    {OP_FILL, "fill 1025 at 5", 1025, 5, 0, 0, 0},
    {OP_FILL, "fill 3000 at 1", 3000, 1, 0, 0, 0},
    /* element-wise: a n */
    {OP_ELEMENTWISE, "eltwise n=1", 1, 0, 0, 0, 0},
    {OP_ELEMENTWISE, "eltwise n=1001", 1001, 0, 0, 0, 0},
    /* fused: a rows, b cols (out), c in of linear + ReLU, f p of bias + dropout + residual:
     * widths below and not multiples of 4 make a group of four cross rows, and the bias
     * column wrap inside a group */
    {OP_FUSED, "fused 1x1 p=0.1", 1, 1, 3, 0.1f, 0},
    {OP_FUSED, "fused 7x2 p=0.5", 7, 2, 5, 0.5f, 0},
    {OP_FUSED, "fused 9x3 p=0", 9, 3, 4, 0.0f, 0},
    {OP_FUSED, "fused 33x5 p=0.1", 33, 5, 6, 0.1f, 0},
    {OP_FUSED, "fused 130x256 p=0.1", 130, 256, 64, 0.1f, 0},
    /* the item shape's runs of 32: whole runs in one row, runs across rows, a partial last */
    {OP_FUSED, "fused 37x40 p=0.1", 37, 40, 16, 0.1f, 0},
    /* linear+relu in gemm_cpu's store (over 64 rows: not gemm_cpu_bt's): rows not a multiple
     * of its blocks' 6 or 8, 40 columns a last block of 8 (the store's copy), a sum over 136 */
    {OP_FUSED, "fused 70x40 p=0.1", 70, 40, 136, 0.1f, 0},
    /* heads: a batch, b n, c heads; f head_dim; flag = extra columns of ld */
    {OP_HEADS, "heads 1x1x1 dh=1", 1, 1, 1, 1, 0},
    {OP_HEADS, "heads 2x5x3 dh=4 ld+7", 2, 5, 3, 4, 7},
    {OP_HEADS, "heads 3x9x8 dh=16", 3, 9, 8, 16, 0},
    /* colsum: a rows, b cols, flag = extra ld | 64 for accumulate */
    {OP_COLSUM, "colsum rows=1", 1, 5, 0, 0, 0},
    {OP_COLSUM, "colsum rows=64", 64, 3, 0, 0, 2},
    {OP_COLSUM, "colsum rows=65 acc", 65, 130, 0, 0, 64},
    {OP_COLSUM, "colsum rows=200 ld+3", 200, 2, 0, 0, 3},
    /* the item shape's span of 32 columns whole, then two vectors and two columns */
    {OP_COLSUM, "colsum rows=70 cols=50 ld+1", 70, 50, 0, 0, 1},
    /* past layers.c's COLSUM_ONE_PASS floats: two launches on a CPU too */
    {OP_COLSUM, "colsum rows=2100 cols=500", 2100, 500, 0, 0, 64},
    /* sum of squares: a n */
    {OP_SUMSQ, "sumsq n=1", 1, 0, 0, 0, 0},
    {OP_SUMSQ, "sumsq n=255", 255, 0, 0, 0, 0},
    {OP_SUMSQ, "sumsq n=257", 257, 0, 0, 0, 0},
    {OP_SUMSQ, "sumsq n=100003", 100003, 0, 0, 0, 0},
    /* cross-entropy: a rows, b V, f eps; flag 1 = in place, 2 = large logits, 4 = scale 0.5 */
    {OP_XENT, "xent eps=0", 6, 11, 0, 0.0f, 0},
    {OP_XENT, "xent eps=0.1 in place", 6, 11, 0, 0.1f, 1},
    {OP_XENT, "xent rows=1 V=5", 1, 5, 0, 0.1f, 4},
    {OP_XENT, "xent V=1000 large logits", 9, 1000, 0, 0.2f, 3},
    {OP_XENT, "xent V=7 all pad", 3, 7, 0, 0.1f, 8},
    {OP_XENT, "xent V=40 one spike a row", 40, 40, 0, 0.1f, 16},
    /* argmax: a rows, b cols, flag = extra ld */
    {OP_ARGMAX, "argmax 1x1", 1, 1, 0, 0, 0},
    {OP_ARGMAX, "argmax ties NaN", 6, 9, 0, 0, 2},
    {OP_ARGMAX, "argmax cols=1000", 4, 1000, 0, 0, 0},
    /* Adam: a n, f lr, flag 1 = clip (active), 2 = clip (inactive) */
    {OP_ADAM, "adam n=1", 1, 0, 0, 1e-2f, 0},
    {OP_ADAM, "adam n=1000", 1000, 0, 0, 1e-2f, 0},
    {OP_ADAM, "adam clip active", 777, 0, 0, 1e-2f, 1},
    {OP_ADAM, "adam clip inactive", 300, 0, 0, 1e-2f, 2},
    /* transpose: a rows, b cols, c extra leading dimension; blocks of 8 x 8 and edges */
    {OP_TRANSPOSE, "transpose 1x1", 1, 1, 0, 0, 0},
    {OP_TRANSPOSE, "transpose 8x8", 8, 8, 0, 0, 0},
    {OP_TRANSPOSE, "transpose 7x13 ld+3", 7, 13, 3, 0, 0},
    {OP_TRANSPOSE, "transpose 17x40 ld+5", 17, 40, 5, 0, 0},
    {OP_TRANSPOSE, "transpose 130x9", 130, 9, 0, 0, 0},
    {OP_TRANSPOSE, "transpose 256x136", 256, 136, 0, 0, 0},
    /* batched products, 3 of them: a m, b n, c k; flag 1 = A transposed, 2 = B transposed,
     * 4 = alpha -0.5 and beta 0.75 (else 1 and 0). On a CPU relcl's kernels (gemm.cl),
     * CLBlast's elsewhere and in layers_group (RELCL_HEAD_GEMM): B as laid out in gemm_cpu (8
     * or 6 rows by 2 W columns a work-item); B transposed with n >= 12 in gemm_cpu_bt (a block
     * of 2 W columns of B transposed into local memory, through registers where whole and k a
     * multiple of 16, element by element otherwise; sums over 128 in slices), with n < 12 in
     * gemm_heads_dots (k a multiple of 4 and A as laid out: dot products across a float4;
     * otherwise one term at a time). */
    {OP_BATCHED, "batched 1x1x1", 1, 1, 1, 0, 0},
    {OP_BATCHED, "batched 37x29x13", 37, 29, 13, 0, 0},
    {OP_BATCHED, "batched B^T 37x29x13", 37, 29, 13, 0, 2},
    {OP_BATCHED, "batched A^T 37x29x13", 37, 29, 13, 0, 1},
    {OP_BATCHED, "batched A^T B^T 37x29x13 beta", 37, 29, 13, 0, 7},
    {OP_BATCHED, "batched B^T 5x70x3 beta", 5, 70, 3, 0, 6},
    {OP_BATCHED, "batched 33x17x35 beta", 33, 17, 35, 0, 4},
    {OP_BATCHED, "batched B^T 32x32x64 (Q K^T)", 32, 32, 64, 0, 2},
    {OP_BATCHED, "batched 32x64x32 (alpha V)", 32, 64, 32, 0, 0},
    {OP_BATCHED, "batched A^T 32x64x32 (dV)", 32, 64, 32, 0, 1},
    {OP_BATCHED, "batched A^T 70x33x65 beta", 70, 33, 65, 0, 5},
    {OP_BATCHED, "batched B^T 7x7x64 (short Q K^T)", 7, 7, 64, 0, 2},
    {OP_BATCHED, "batched A^T B^T 9x5x13 beta", 9, 5, 13, 0, 7},
    {OP_BATCHED, "batched 7x64x7 (short alpha V)", 7, 64, 7, 0, 0},
    {OP_BATCHED, "batched B^T 20x80x48 beta", 20, 80, 48, 0, 6},
    {OP_BATCHED, "batched A^T B^T 40x64x32", 40, 64, 32, 0, 3},
    {OP_BATCHED, "batched B^T 3x17x300 beta", 3, 17, 300, 0, 6},
    {OP_BATCHED, "batched B^T 9x16x129", 9, 16, 129, 0, 2},
    {OP_BATCHED, "batched B^T 10x11x64 beta", 10, 11, 64, 0, 6},
    {OP_BATCHED, "batched B^T 10x12x64 beta", 10, 12, 64, 0, 6},
    /* a last block of at most half of gemm_cpu's rows, in a block of half the height (also
     * 33x17x35, B^T 3x17x300, 9x16x129 and 10x12x64 above with AVX-512's 8-row blocks) */
    {OP_BATCHED, "batched A^T 36x20x40 beta", 36, 20, 40, 0, 5},
    /* last blocks of two rows, and of one below (the decoder's 17 labels), which run in a
     * block of half the height */
    {OP_BATCHED, "batched A^T 18x40x24 beta", 18, 40, 24, 0, 5},
    {OP_BATCHED, "batched B^T 18x40x24", 18, 40, 24, 0, 2},
    /* flag 16: a second term of f terms, A2 B2 (relcl__gemm_plus; flag 32: one B2 for all, a
     * shared table's window): in gemm_cpu_batch's sum on a CPU, a second product elsewhere
     * and for one product (flag 8) */
    {OP_BATCHED, "plus 32x64x32+17 shared", 32, 64, 32, 17, 48},
    {OP_BATCHED, "plus 32x64x32+33 beta", 32, 64, 32, 33, 20},
    {OP_BATCHED, "plus A^T 37x70x13+5 beta shared", 37, 70, 13, 5, 53},
    {OP_BATCHED, "plus 7x64x7+1 shared", 7, 64, 7, 1, 48},
    {OP_BATCHED, "plus 36x20x40+3 beta", 36, 20, 40, 3, 20},
    {OP_BATCHED, "plus single 37x29x13+9", 37, 29, 13, 9, 24},
    /* flag 64: C in the heads' layout (relcl__gemm_plus: attention's outputs merged as they
     * are written), 6 products in 2 groups of 3 heads */
    {OP_BATCHED, "heads 32x64x32", 32, 64, 32, 0, 64},
    {OP_BATCHED, "heads A^T 32x64x32", 32, 64, 32, 0, 65},
    {OP_BATCHED, "heads 32x64x32+17 shared", 32, 64, 32, 17, 112},
    {OP_BATCHED, "heads A^T 37x70x13+5 beta", 37, 70, 13, 5, 85},
    {OP_BATCHED, "heads 7x20x9", 7, 20, 9, 0, 64},
    /* flag 8: one product (batch 1): relcl's gemm_cpu on a CPU (2 W columns by 8 or 6 rows a
     * work-item; B transposed through a transposed copy), CLBlast elsewhere and in the _group
     * runs (RELCL_CPU_GEMM): whole blocks, the row and column edges, both of A's layouts */
    {OP_BATCHED, "single 1x1x1", 1, 1, 1, 0, 8},
    {OP_BATCHED, "single 37x29x13", 37, 29, 13, 0, 8},
    {OP_BATCHED, "single A^T B^T 37x70x13 beta", 37, 70, 13, 0, 15},
    {OP_BATCHED, "single B^T 64x96x40", 64, 96, 40, 0, 10},
    {OP_BATCHED, "single A^T 40x64x300 beta", 40, 64, 300, 0, 13},
    {OP_BATCHED, "single 17x33x129 beta", 17, 33, 129, 0, 12},
    {OP_BATCHED, "single B^T 17x100x64 (decoder label values)", 17, 100, 64, 0, 10},
    {OP_BATCHED, "single A^T 9x130x7", 9, 130, 7, 0, 9},
    /* a long weight gradient, in slices (on AVX-512 devices the fewest of at most 768, of
     * equal length in multiples of 16: 512 + 488, 576 + 576 + 548); a wide B (over 512
     * columns), whose work-items go down the rows first */
    {OP_BATCHED, "single A^T 20x40x1000 beta", 20, 40, 1000, 0, 13},
    {OP_BATCHED, "single A^T 24x40x1700 beta", 24, 40, 1700, 0, 13},
    {OP_BATCHED, "single B^T 10x600x5", 10, 600, 5, 0, 10},
    /* B as laid out, its rows 1024 floats or more apart, read in panels (gemm.c's panels():
     * k over 256, 256 rows or more), the last one of 6 columns; a weight gradient's slices
     * (2 x 400 on AVX-512 devices: 400 + 380) over one copy. (Every B^T product above goes
     * through panels.) */
    {OP_BATCHED, "single 260x1030x300 beta", 260, 1030, 300, 0, 12},
    {OP_BATCHED, "single A^T 256x1030x780", 256, 1030, 780, 0, 9},
    /* the same with rows under a page apart and with a sum of 65 to 256: in panels with 8
     * floats or fewer a vector, in place on AVX-512 devices below 2048 rows (gemm.c's
     * pack_b), in panels from there (the last case, with a last panel of 4 columns) */
    {OP_BATCHED, "single 300x200x400 beta", 300, 200, 400, 0, 12},
    {OP_BATCHED, "single 270x100x200", 270, 100, 200, 0, 8},
    {OP_BATCHED, "single 2050x100x200 beta", 2050, 100, 200, 0, 12},
    /* A transposed, its rows 1024 floats or more apart; slices of 400 + 400 (AVX-512) */
    {OP_BATCHED, "single A^T 1030x260x300 beta", 1030, 260, 300, 0, 13},
    {OP_BATCHED, "single A^T 1025x256x800", 1025, 256, 800, 0, 9},
    /* A as laid out and a sum over 1024: slices of 512 on AVX-512 devices (512 + 512 + 276),
     * beta on the first only; a wide B of over 2 MB (more than half of any L2 up to 4 MB),
     * whose work-items go down the rows first there */
    {OP_BATCHED, "single 40x70x1300 beta", 40, 70, 1300, 0, 12},
    {OP_BATCHED, "single B^T 10x1100x520", 10, 1100, 520, 0, 10},
    /* a short sum (k <= 64), A and B as laid out, 64 rows or more: gemm_cpu_batch over
     * blocks of 32 rows (24 with AVX2's 6-row blocks), B shared; a last, shorter block */
    {OP_BATCHED, "single 150x40x33 beta", 150, 40, 33, 0, 12},
    {OP_BATCHED, "single 96x70x17", 96, 70, 17, 0, 8},
    /* relu linear backward: a rows, b in, c out. ReLU's backward in gemm_cpu's store on a
     * CPU: whole blocks, a last block of columns (in = 33), a wide product (in > 512: its
     * work-items go down the rows first); relu_bwd after the product for a short sum (out
     * <= 64, 64 rows or more: gemm_cpu_batch) and in the _group runs (CLBlast) */
    {OP_RELU_LINEAR, "relu linear 64x96x100", 64, 96, 100, 0, 0},
    {OP_RELU_LINEAR, "relu linear 130x33x100", 130, 33, 100, 0, 0},
    {OP_RELU_LINEAR, "relu linear 37x1030x80", 37, 1030, 80, 0, 0},
    {OP_RELU_LINEAR, "relu linear 96x64x40", 96, 64, 40, 0, 0},
    {OP_RELU_LINEAR, "relu linear 20x40x1100 (sliced sum)", 20, 40, 1100, 0, 0},
    /* the feed-forward's four ops with the hidden's rows padded: a rows, b d, c hidden, flag
     * the padding (floats a row); the issue-8 model's 1024 padded to 1040 as relcl__act_ld
     * pads it on AVX2 CPUs, over several work-items of gemm_cpu's four blocks of rows */
    {OP_FFN_LD, "ffn 100x24x40 ld 56", 100, 24, 40, 0, 16},
    {OP_FFN_LD, "ffn 7x16x33 ld 37", 7, 16, 33, 0, 4},
    {OP_FFN_LD, "ffn 130x256x1024 ld 1040", 130, 256, 1024, 0, 16},
};

/* ---- helpers ---- */

static int keep_buffers;
static cl_mem kept[4096];
static size_t n_kept;

static void release(cl_mem m) {
  if (m == NULL) return;
  if (keep_buffers && n_kept < sizeof kept / sizeof *kept)
    kept[n_kept++] = m;
  else
    clReleaseMemObject(m);
}

static relcl_buf B0(cl_mem m) { return relcl_buf_at(m, 0); }

static cl_mem dev_zeros(relcl_context *ctx, size_t n) {
  cl_mem m;
  TU_OK(relcl_alloc(ctx, n ? n : 1, &m));
  TU_OK(relcl_fill(ctx, B0(m), 0.0f, n ? n : 1));
  return m;
}

static double *to_double(const float *x, size_t n) {
  double *d = calloc(n ? n : 1, sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

static int same_bits(const void *a, const void *b, size_t n) {
  return memcmp(a, b, n * 4) == 0;
}

/* ---- layer norm ---- */

/* relcl__layernorm_add_forward (the decoder's post-norm blocks): layer norm of res + (a +
 * xb) in one launch, against relcl__bias_dropout_residual at p 0 into a buffer and then
 * relcl__layernorm_forward of it, bit for bit: y, mean and rstd */
static void check_layernorm_add(relcl_context *ctx, const layer_case *c, const float *res,
                                const float *g, const float *b) {
  const int rows = c->a, d = c->b;
  const size_t n = (size_t)rows * d;
  float *a = tu_alloc_host(n), *xb = tu_alloc_host((size_t)d);
  tu_fill(a, n, 16);
  tu_fill(xb, (size_t)d, 17);
  cl_mem A = tu_upload(ctx, a, n), XB = tu_upload(ctx, xb, (size_t)d),
         RES = tu_upload(ctx, res, n), Gm = tu_upload(ctx, g, (size_t)d),
         Bm = tu_upload(ctx, b, (size_t)d), S = dev_zeros(ctx, n), Y[2], M[2], R[2];
  for (int i = 0; i < 2; i++)
    Y[i] = dev_zeros(ctx, n), M[i] = dev_zeros(ctx, (size_t)rows),
    R[i] = dev_zeros(ctx, (size_t)rows);
  TU_OK(relcl__bias_dropout_residual(ctx, rows, d, 0.0f, 0, 0, B0(A), B0(XB), B0(RES), B0(S),
                                     RELCL_BUF_NONE));
  TU_OK(relcl__layernorm_forward(ctx, rows, d, c->f, B0(S), B0(Gm), B0(Bm), B0(Y[0]), B0(M[0]),
                                 B0(R[0])));
  TU_OK(relcl__layernorm_add_forward(ctx, rows, d, c->f, B0(A), B0(XB), B0(RES), B0(Gm),
                                     B0(Bm), B0(Y[1]), B0(M[1]), B0(R[1])));
  float *y[2], *m[2], *r[2];
  for (int i = 0; i < 2; i++) {
    y[i] = tu_download(ctx, Y[i], n);
    m[i] = tu_download(ctx, M[i], (size_t)rows);
    r[i] = tu_download(ctx, R[i], (size_t)rows);
  }
  tu_check(same_bits(y[0], y[1], n) && same_bits(m[0], m[1], (size_t)rows) &&
               same_bits(r[0], r[1], (size_t)rows),
           "%-28s residual + bias + ln in one launch: the bits of the two", c->name);
  for (int i = 0; i < 2; i++) free(y[i]), free(m[i]), free(r[i]), release(Y[i]), release(M[i]),
                              release(R[i]);
  cl_mem all[] = {A, XB, RES, Gm, Bm, S};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
  free(a), free(xb);
}

/* A post-norm block's forward in training: res + dropout(x + xb) and its keep bits, then
 * layer norm of it (relcl__bias_dropout_residual_layernorm), in one pass where it runs so
 * (CPUs, d a multiple of 32: one command), against the two calls apart, bit for bit */
static void check_layernorm_dropout_forward(relcl_context *ctx, const layer_case *c,
                                            const float *res, const float *g, const float *b) {
  const int rows = c->a, d = c->b;
  const size_t n = (size_t)rows * d, words = (n + 31) / 32;
  float *a = tu_alloc_host(n), *xb = tu_alloc_host((size_t)d);
  tu_fill(a, n, 18);
  tu_fill(xb, (size_t)d, 19);
  cl_mem A = tu_upload(ctx, a, n), XB = tu_upload(ctx, xb, (size_t)d),
         RES = tu_upload(ctx, res, n), Gm = tu_upload(ctx, g, (size_t)d),
         Bm = tu_upload(ctx, b, (size_t)d), S[2], K[2], Y[2], M[2], R[2];
  for (int i = 0; i < 2; i++)
    S[i] = dev_zeros(ctx, n), K[i] = dev_zeros(ctx, words), Y[i] = dev_zeros(ctx, n),
    M[i] = dev_zeros(ctx, (size_t)rows), R[i] = dev_zeros(ctx, (size_t)rows);
  const float p = 0.3f;
  TU_OK(relcl__bias_dropout_residual(ctx, rows, d, p, 3, 11, B0(A), B0(XB), B0(RES), B0(S[0]),
                                     B0(K[0])));
  TU_OK(relcl__layernorm_forward(ctx, rows, d, c->f, B0(S[0]), B0(Gm), B0(Bm), B0(Y[0]),
                                 B0(M[0]), B0(R[0])));
  TU_OK(relcl_finish(ctx));
  TU_OK(relcl_profile_enable(ctx, 1));
  TU_OK(relcl_profile_reset(ctx));
  TU_OK(relcl__bias_dropout_residual_layernorm(ctx, rows, d, c->f, p, 3, 11, B0(A), B0(XB),
                                               B0(RES), B0(S[1]), B0(K[1]), B0(Gm), B0(Bm),
                                               B0(Y[1]), B0(M[1]), B0(R[1])));
  TU_OK(relcl_finish(ctx));
  relcl_profile_summary sum;
  TU_OK(relcl_profile_summary_get(ctx, &sum));
  TU_OK(relcl_profile_enable(ctx, 0));
  if (relcl__row_item(ctx) && d % 32 == 0)
    tu_check(sum.commands == 1, "%-28s bias + dropout + residual + ln: %ld commands (1)",
             c->name, sum.commands);
  const size_t len[5] = {n, words, n, (size_t)rows, (size_t)rows};
  cl_mem *bufs[5] = {S, K, Y, M, R};
  int same = 1;
  for (int k = 0; k < 5; k++) {
    float *u = tu_download(ctx, bufs[k][0], len[k]), *v = tu_download(ctx, bufs[k][1], len[k]);
    same &= same_bits(u, v, len[k]);
    free(u), free(v);
  }
  tu_check(same, "%-28s bias + dropout + residual + ln at once: the bits of the two apart",
           c->name);
  for (int i = 0; i < 2; i++)
    release(S[i]), release(K[i]), release(Y[i]), release(M[i]), release(R[i]);
  cl_mem all[] = {A, XB, RES, Gm, Bm};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
  free(a), free(xb);
}

/* Layer norm's backward, dropout's backward of its dx and the column sums of that (a
 * post-norm block's backward, lib/model/model_graph.c: the gradient of the sublayer's output
 * bias), in one pass where relcl__layernorm_dropout_backward runs them so (CPUs, the item
 * shape: ln_bwd_params and colsum_finish, two commands), against the three calls apart, bit
 * for bit (dx, the dropped dx, the three gradients) */
static void check_layernorm_dropout(relcl_context *ctx, const layer_case *c, const float *x,
                                    const float *g, const float *dy) {
  const int rows = c->a, d = c->b;
  const size_t n = (size_t)rows * d, words = (n + 31) / 32;
  const float p = 0.3f;
  cl_mem X = tu_upload(ctx, x, n), Gm = tu_upload(ctx, g, (size_t)d), Bm = dev_zeros(ctx, d),
         Y = dev_zeros(ctx, n), M = dev_zeros(ctx, (size_t)rows), R = dev_zeros(ctx, rows),
         DY = tu_upload(ctx, dy, n), KEEP = dev_zeros(ctx, words), DX[2], DA[2], DG[2], DB[2],
         DS[2];
  TU_OK(relcl__layernorm_forward(ctx, rows, d, c->f, B0(X), B0(Gm), B0(Bm), B0(Y), B0(M),
                                 B0(R)));
  /* the keep bits of a forward's dropout of n elements (Y's values do not matter) */
  TU_OK(relcl__dropout_forward(ctx, n, p, 5, 9, B0(X), RELCL_BUF_NONE, B0(Y), B0(KEEP)));
  for (int i = 0; i < 2; i++) {
    DX[i] = dev_zeros(ctx, n), DA[i] = dev_zeros(ctx, n);
    DG[i] = dev_zeros(ctx, (size_t)d), DB[i] = dev_zeros(ctx, (size_t)d);
    DS[i] = dev_zeros(ctx, (size_t)d);
    TU_OK(relcl_fill(ctx, B0(DG[i]), 1.0f, (size_t)d));
    TU_OK(relcl_fill(ctx, B0(DB[i]), 1.0f, (size_t)d));
    TU_OK(relcl_fill(ctx, B0(DS[i]), 0.5f, (size_t)d));
  }
  TU_OK(relcl__layernorm_backward(ctx, rows, d, B0(X), B0(Gm), B0(M), B0(R), B0(DY), B0(DX[0]),
                                  0, B0(DG[0]), B0(DB[0])));
  TU_OK(relcl__dropout_backward(ctx, n, p, 5, 9, B0(DX[0]), B0(DA[0]), 0, B0(KEEP)));
  TU_OK(relcl__colsum(ctx, rows, d, B0(DA[0]), d, B0(DS[0]), 1));
  /* once before the count, which a scratch buffer the pool grows for would add to */
  TU_OK(relcl__layernorm_dropout_backward(ctx, rows, d, B0(X), B0(Gm), B0(M), B0(R), B0(DY),
                                          B0(DX[1]), B0(DG[1]), B0(DB[1]), p, 5, 9, B0(KEEP),
                                          B0(DA[1]), B0(DS[1])));
  TU_OK(relcl_fill(ctx, B0(DG[1]), 1.0f, (size_t)d));
  TU_OK(relcl_fill(ctx, B0(DB[1]), 1.0f, (size_t)d));
  TU_OK(relcl_fill(ctx, B0(DS[1]), 0.5f, (size_t)d));
  TU_OK(relcl_finish(ctx));
  TU_OK(relcl_profile_enable(ctx, 1));
  TU_OK(relcl_profile_reset(ctx));
  TU_OK(relcl__layernorm_dropout_backward(ctx, rows, d, B0(X), B0(Gm), B0(M), B0(R), B0(DY),
                                          B0(DX[1]), B0(DG[1]), B0(DB[1]), p, 5, 9, B0(KEEP),
                                          B0(DA[1]), B0(DS[1])));
  TU_OK(relcl_finish(ctx));
  relcl_profile_summary sum;
  TU_OK(relcl_profile_summary_get(ctx, &sum));
  TU_OK(relcl_profile_enable(ctx, 0));
  if (relcl__row_item(ctx))
    tu_check(sum.commands == 2, "%-28s ln + dropout + sums backward: %ld commands (2)",
             c->name, sum.commands);
  const size_t len[5] = {n, n, (size_t)d, (size_t)d, (size_t)d};
  cl_mem *bufs[5] = {DX, DA, DG, DB, DS};
  int same = 1;
  for (int k = 0; k < 5; k++) {
    float *u = tu_download(ctx, bufs[k][0], len[k]), *v = tu_download(ctx, bufs[k][1], len[k]);
    same &= same_bits(u, v, len[k]);
    free(u), free(v);
  }
  tu_check(same, "%-28s ln + dropout + sums backward at once: the bits apart", c->name);
  for (int i = 0; i < 2; i++)
    release(DX[i]), release(DA[i]), release(DG[i]), release(DB[i]), release(DS[i]);
  cl_mem all[] = {X, Gm, Bm, Y, M, R, DY, KEEP};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
}

static void check_layernorm(relcl_context *ctx, const layer_case *c) {
  const int rows = c->a, d = c->b, acc = c->flag & 1;
  const size_t n = (size_t)rows * d;
  float *x = tu_alloc_host(n), *g = tu_alloc_host((size_t)d), *b = tu_alloc_host((size_t)d),
        *dy = tu_alloc_host(n), *dx0 = tu_alloc_host(n);
  tu_fill(x, n, 11);
  for (size_t i = 0; i < n; i++) x[i] = 3.0f * x[i] + 0.5f; /* off-centre rows */
  tu_fill(g, (size_t)d, 12);
  tu_fill(b, (size_t)d, 13);
  tu_fill(dy, n, 14);
  tu_fill(dx0, n, 15);
  double *y = calloc(n, sizeof *y), *mean = calloc((size_t)rows, sizeof *mean),
         *rstd = calloc((size_t)rows, sizeof *rstd), *dx = calloc(n, sizeof *dx),
         *dg = calloc((size_t)d, sizeof *dg), *db = calloc((size_t)d, sizeof *db);
  ref_layernorm_forward(rows, d, c->f, x, g, b, y, mean, rstd);
  ref_layernorm_backward(rows, d, c->f, x, g, dy, dx, dg, db);
  if (acc)
    for (size_t i = 0; i < n; i++) dx[i] += dx0[i];
  /* parameter gradients accumulate: start them at 1 */
  for (int i = 0; i < d; i++) dg[i] += 1.0, db[i] += 1.0;

  float *out[2][5];
  for (int run = 0; run < 2; run++) {
    cl_mem X = tu_upload(ctx, x, n), Gm = tu_upload(ctx, g, (size_t)d),
           Bm = tu_upload(ctx, b, (size_t)d), Y = dev_zeros(ctx, n),
           M = dev_zeros(ctx, (size_t)rows), R = dev_zeros(ctx, (size_t)rows),
           DY = tu_upload(ctx, dy, n), DX = tu_upload(ctx, dx0, n), DG, DB;
    TU_OK(relcl_alloc(ctx, (size_t)d, &DG));
    TU_OK(relcl_alloc(ctx, (size_t)d, &DB));
    TU_OK(relcl_fill(ctx, B0(DG), 1.0f, (size_t)d));
    TU_OK(relcl_fill(ctx, B0(DB), 1.0f, (size_t)d));
    TU_OK(relcl_layernorm_forward(ctx, rows, d, c->f, B0(X), B0(Gm), B0(Bm), B0(Y), B0(M),
                                  B0(R)));
    TU_OK(relcl_layernorm_backward(ctx, rows, d, B0(X), B0(Gm), B0(M), B0(R), B0(DY), B0(DX),
                                   acc, B0(DG), B0(DB)));
    out[run][0] = tu_download(ctx, Y, n);
    out[run][1] = tu_download(ctx, DX, n);
    out[run][2] = tu_download(ctx, DG, (size_t)d);
    out[run][3] = tu_download(ctx, DB, (size_t)d);
    out[run][4] = tu_download(ctx, R, (size_t)rows);
    cl_mem all[] = {X, Gm, Bm, Y, M, R, DY, DX, DG, DB};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
  }
  double e;
  e = tu_rel_err(out[0][0], y, n, 1e-2);
  tu_check(e < 2e-5, "%-28s y      rel err %.2e", c->name, e);
  e = tu_rel_err(out[0][4], rstd, (size_t)rows, 1e-2);
  tu_check(e < 2e-5, "%-28s rstd   rel err %.2e", c->name, e);
  e = tu_rel_err(out[0][1], dx, n, 1e-2);
  tu_check(e < 1e-4, "%-28s dx     rel err %.2e", c->name, e);
  e = tu_rel_err(out[0][2], dg, (size_t)d, 1e-2);
  tu_check(e < 2e-5, "%-28s dgain  rel err %.2e", c->name, e);
  e = tu_rel_err(out[0][3], db, (size_t)d, 1e-2);
  tu_check(e < 2e-5, "%-28s dbias  rel err %.2e", c->name, e);
  int same = same_bits(out[0][0], out[1][0], n) && same_bits(out[0][1], out[1][1], n) &&
             same_bits(out[0][2], out[1][2], (size_t)d) &&
             same_bits(out[0][3], out[1][3], (size_t)d);
  tu_check(same, "%-28s bitwise identical on a second run", c->name);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 5; i++) free(out[r][i]);
  check_layernorm_add(ctx, c, x, g, b);
  check_layernorm_dropout(ctx, c, x, g, dy);
  check_layernorm_dropout_forward(ctx, c, x, g, b);
  free(x), free(g), free(b), free(dy), free(dx0), free(y), free(mean), free(rstd), free(dx);
  free(dg), free(db);
}

/* ---- embedding ---- */

/* The embeddings in training: the lookup then dropout in place with its keep bits
 * (relcl__embedding_dropout_forward), in one launch where it runs so (CPUs, d a multiple of
 * 32), against the two calls apart, bit for bit (the rows and the keep bits) */
static void check_embedding_dropout(relcl_context *ctx, const layer_case *c,
                                    const int32_t *ids, const float *table) {
  const int n = c->a, d = c->b, vocab = c->c;
  const size_t no = (size_t)n * d, words = (no + 31) / 32;
  const float p = 0.25f, scale = 1.5f;
  cl_mem I = tu_upload(ctx, ids, (size_t)n), T = tu_upload(ctx, table, (size_t)vocab * d), Y[2],
         K[2];
  for (int i = 0; i < 2; i++) Y[i] = dev_zeros(ctx, no), K[i] = dev_zeros(ctx, words);
  TU_OK(relcl__embedding_forward(ctx, n, d, vocab, B0(I), B0(T), scale, B0(Y[0])));
  TU_OK(relcl__dropout_forward(ctx, no, p, 4, 6, B0(Y[0]), RELCL_BUF_NONE, B0(Y[0]), B0(K[0])));
  TU_OK(relcl_finish(ctx));
  TU_OK(relcl_profile_enable(ctx, 1));
  TU_OK(relcl_profile_reset(ctx));
  TU_OK(relcl__embedding_dropout_forward(ctx, n, d, vocab, B0(I), B0(T), scale, p, 4, 6,
                                         B0(Y[1]), B0(K[1])));
  TU_OK(relcl_finish(ctx));
  relcl_profile_summary sum;
  TU_OK(relcl_profile_summary_get(ctx, &sum));
  TU_OK(relcl_profile_enable(ctx, 0));
  if (relcl__row_item(ctx) && d % 32 == 0)
    tu_check(sum.commands == 1, "%-28s lookup + dropout: %ld commands (1)", c->name,
             sum.commands);
  float *y[2], *k[2];
  for (int i = 0; i < 2; i++)
    y[i] = tu_download(ctx, Y[i], no), k[i] = tu_download(ctx, K[i], words);
  tu_check(same_bits(y[0], y[1], no) && same_bits(k[0], k[1], words),
           "%-28s lookup + dropout at once: the bits of the two apart", c->name);
  for (int i = 0; i < 2; i++) free(y[i]), free(k[i]), release(Y[i]), release(K[i]);
  release(I), release(T);
}

static void check_embedding(relcl_context *ctx, const layer_case *c) {
  const int n = c->a, d = c->b, vocab = c->c;
  const size_t nt = (size_t)vocab * d, no = (size_t)n * d;
  int32_t *ids = calloc((size_t)n, sizeof *ids);
  uint64_t s = 21;
  for (int t = 0; t < n; t++) {
    ids[t] = (int32_t)(tu_next(&s) % (uint64_t)vocab);
    if (c->flag & 1) ids[t] = ids[t] % 3; /* few distinct ids, each many times */
    if ((c->flag & 2) && t % 7 == 3) ids[t] = t % 2 ? vocab + t : -1 - t;
  }
  if (c->flag == 3)
    for (int t = 0; t < n; t++) ids[t] = 2;
  float *table = tu_alloc_host(nt), *dout = tu_alloc_host(no), *dt0 = tu_alloc_host(nt);
  tu_fill(table, nt, 22);
  tu_fill(dout, no, 23);
  tu_fill(dt0, nt, 24);
  const float scale = 2.8284271f;
  double *y = calloc(no, sizeof *y), *dtab = to_double(dt0, nt);
  ref_embedding_forward(n, d, vocab, ids, table, scale, y);
  ref_embedding_backward(n, d, vocab, ids, dout, scale, dtab);
  float *dtab_f = tu_alloc_host(nt);
  memcpy(dtab_f, dt0, nt * 4);
  ref_embedding_backward_float(n, d, vocab, ids, dout, scale, dtab_f);

  int32_t *tok = calloc((size_t)n + 1, 4), *ofs = calloc((size_t)n + 2, 4),
          *pos = calloc((size_t)n + 1, 4);
  int n_tok = -1;
  TU_OK(relcl_embedding_index(ids, n, vocab, tok, ofs, pos, &n_tok));
  /* the index itself: ascending distinct ids, ascending positions, every valid one once */
  int ok = n_tok >= 0 && ofs[0] == 0, valid = 0;
  for (int t = 0; t < n; t++) valid += ids[t] >= 0 && ids[t] < vocab;
  ok = ok && ofs[n_tok] == valid;
  for (int u = 0; ok && u < n_tok; u++) {
    ok = (u == 0 || tok[u] > tok[u - 1]) && ofs[u + 1] > ofs[u];
    for (int q = ofs[u]; ok && q < ofs[u + 1]; q++)
      ok = ids[pos[q]] == tok[u] && (q == ofs[u] || pos[q] > pos[q - 1]);
  }
  tu_check(ok, "%-28s index: %d distinct ids, positions ascending", c->name, n_tok);

  float *fwd[2], *bwd[2];
  for (int run = 0; run < 2; run++) {
    cl_mem I = tu_upload(ctx, ids, (size_t)n), T = tu_upload(ctx, table, nt),
           Y = dev_zeros(ctx, no), DO = tu_upload(ctx, dout, no), DT = tu_upload(ctx, dt0, nt),
           TK = tu_upload(ctx, tok, (size_t)n + 1), OF = tu_upload(ctx, ofs, (size_t)n + 2),
           PS = tu_upload(ctx, pos, (size_t)n + 1);
    TU_OK(relcl_embedding_forward(ctx, n, d, vocab, B0(I), B0(T), scale, B0(Y)));
    TU_OK(relcl_embedding_backward(ctx, n_tok, d, vocab, B0(TK), B0(OF), B0(PS), B0(DO), scale,
                                   B0(DT)));
    fwd[run] = tu_download(ctx, Y, no);
    bwd[run] = tu_download(ctx, DT, nt);
    cl_mem all[] = {I, T, Y, DO, DT, TK, OF, PS};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
  }
  /* forward: one product per entry, the same in float on both sides */
  int exact = 1;
  for (size_t i = 0; i < no; i++) exact &= fwd[0][i] == (float)y[i];
  tu_check(exact, "%-28s forward matches (one rounding)", c->name);
  double e = tu_rel_err(bwd[0], dtab, nt, 1e-2);
  tu_check(e < 1e-4, "%-28s dtable rel err vs double %.2e", c->name, e);
  tu_check(same_bits(bwd[0], dtab_f, nt), "%-28s dtable bit-exact vs fixed-order float sum",
           c->name);
  tu_check(same_bits(fwd[0], fwd[1], no) && same_bits(bwd[0], bwd[1], nt),
           "%-28s bitwise identical on a second run", c->name);
  for (int r = 0; r < 2; r++) free(fwd[r]), free(bwd[r]);
  check_embedding_dropout(ctx, c, ids, table);
  free(ids), free(table), free(dout), free(dt0), free(y), free(dtab), free(dtab_f), free(tok);
  free(ofs), free(pos);
}

/* ---- dropout ---- */

/* The model's graph (lib/ops/ops.h's keep bits): the forward given a keep region writes its
 * masks there where the context keeps them (CPUs) and the backward given it reads them. The
 * results are the reference's bits either way; the region holds either its fill (nothing
 * written) or every element's decision (bit i mod 32 of word i / 32), and the words past it
 * keep their fill. x, r, d0, y, dx: check_dropout's inputs and reference results. */
static void check_dropout_keep(relcl_context *ctx, const layer_case *c, const float *x,
                               const float *r, const float *d0, const float *y,
                               const float *dx) {
  const size_t n = (size_t)c->a, words = relcl__keep_words(n), guard = 8;
  const float p = c->f;
  const int res = c->flag & 1, acc = c->flag & 2;
  const uint64_t seed = 0xfeedbeef12345ULL, stream = 777;
  const uint32_t fill = 0xa5a5a5a5u;
  uint32_t *k0 = malloc((words + guard) * 4);
  for (size_t i = 0; i < words + guard; i++) k0[i] = fill;
  cl_mem X = tu_upload(ctx, x, n), R = tu_upload(ctx, r, n), Y = dev_zeros(ctx, n),
         DX = tu_upload(ctx, d0, n), K = tu_upload(ctx, (const float *)k0, words + guard);
  TU_OK(relcl__dropout_forward(ctx, n, p, seed, stream, B0(X), res ? B0(R) : RELCL_BUF_NONE,
                               B0(Y), B0(K)));
  uint32_t *k = (uint32_t *)tu_download(ctx, K, words + guard);
  TU_OK(relcl__dropout_backward(ctx, n, p, seed, stream, B0(X), B0(DX), acc, B0(K)));
  float *fy = tu_download(ctx, Y, n), *fdx = tu_download(ctx, DX, n);
  tu_check(same_bits(fy, y, n) && same_bits(fdx, dx, n),
           "%-28s keep bits: forward and backward bit-exact vs reference mask", c->name);
  bool untouched = true, bits = true, guarded = true;
  for (size_t i = 0; i < words; i++) untouched &= k[i] == fill;
  for (size_t i = 0; i < n; i++)
    bits &= (int)(k[i / 32] >> (i % 32) & 1u) ==
            (p > 0.0f ? ref_dropout4_keep(seed, stream, i, p) : 1);
  for (size_t i = words; i < words + guard; i++) guarded &= k[i] == fill;
  tu_check((untouched || bits) && guarded,
           "%-28s keep bits: %s, %zu words past them untouched", c->name,
           untouched ? "none written (masks recomputed)" : bits ? "every decision" : "WRONG",
           guard);
  release(X), release(R), release(Y), release(DX), release(K);
  free(k0), free(k), free(fy), free(fdx);
}

static void check_dropout(relcl_context *ctx, const layer_case *c) {
  const size_t n = (size_t)c->a;
  const float p = c->f;
  const int res = c->flag & 1, acc = c->flag & 2;
  const uint64_t seed = 0xfeedbeef12345ULL, stream = 777;
  float *x = tu_alloc_host(n), *r = tu_alloc_host(n), *d0 = tu_alloc_host(n);
  tu_fill(x, n, 31);
  tu_fill(r, n, 32);
  tu_fill(d0, n, 33);
  float *y = tu_alloc_host(n), *dx = tu_alloc_host(n);
  ref_dropout_forward(n, p, seed, stream, x, res ? r : NULL, y);
  /* backward = the same mask and scale on dy (x here), added to d0 when accumulating */
  ref_dropout_forward(n, p, seed, stream, x, acc ? d0 : NULL, dx);
  size_t dropped = 0;
  for (size_t i = 0; i < n; i++) dropped += !ref_dropout4_keep(seed, stream, i, p);

  float *fy[2], *fdx[2];
  for (int run = 0; run < 2; run++) {
    cl_mem X = tu_upload(ctx, x, n), R = tu_upload(ctx, r, n), Y = dev_zeros(ctx, n),
           DX = tu_upload(ctx, d0, n);
    TU_OK(relcl_dropout_forward(ctx, n, p, seed, stream, B0(X), res ? B0(R) : RELCL_BUF_NONE,
                                B0(Y)));
    TU_OK(relcl_dropout_backward(ctx, n, p, seed, stream, B0(X), B0(DX), acc));
    fy[run] = tu_download(ctx, Y, n);
    fdx[run] = tu_download(ctx, DX, n);
    release(X), release(R), release(Y), release(DX);
  }
  tu_check(same_bits(fy[0], y, n), "%-28s forward bit-exact vs reference mask", c->name);
  tu_check(same_bits(fdx[0], dx, n), "%-28s backward bit-exact vs reference mask", c->name);
  tu_check(same_bits(fy[0], fy[1], n) && same_bits(fdx[0], fdx[1], n),
           "%-28s bitwise identical on a second run", c->name);
  /* the dropped fraction is binomial(n, p): within 5 standard deviations (+1) */
  double sd = sqrt((double)n * p * (1.0 - p));
  tu_check(fabs((double)dropped - n * (double)p) <= 5.0 * sd + 1.0,
           "%-28s dropped %zu of %zu (p=%.2f)", c->name, dropped, n, (double)p);
  for (int i = 0; i < 2; i++) free(fy[i]), free(fdx[i]);
  check_dropout_keep(ctx, c, x, r, d0, y, dx);
  free(x), free(r), free(d0), free(y), free(dx);
}

/* ---- linear ---- */

/* x at element off of a buffer whose every other element is NaN: a product that reads past
 * its operand, or mistakes where it starts, turns the result into NaN. */
static cl_mem upload_at(relcl_context *ctx, const float *x, size_t n, size_t off) {
  float *h = tu_alloc_host(n + off + 64);
  for (size_t i = 0; i < n + off + 64; i++) h[i] = i >= off && i < off + n ? x[i - off] : NAN;
  cl_mem m = tu_upload(ctx, h, n + off + 64);
  free(h);
  return m;
}

static float *download_at(relcl_context *ctx, cl_mem m, size_t n, size_t off) {
  float *h = tu_alloc_host(n);
  TU_OK(relcl_read(ctx, relcl_buf_at(m, off), h, n));
  return h;
}

/* A second context with RELCL_WGRAD=copy where the first runs weight gradients in
 * gemm_cpu_at (AVX-512 CPUs: kernels/gemm.cl), else NULL */
static relcl_context *copies;

/* One forward and backward of a linear layer on ctx: y, dx, dW and db downloaded into out
 * (dW and db accumulate onto 0.5, dx onto dx0 with acc) */
static void linear_run(relcl_context *ctx, int rows, int in, int out, int bias, int acc,
                       const float *x, const float *w, const float *b, const float *dy,
                       const float *dx0, float *res[4]) {
  const size_t nx = (size_t)rows * in, nw = (size_t)out * in, ny = (size_t)rows * out;
  cl_mem X = tu_upload(ctx, x, nx), Wm = tu_upload(ctx, w, nw),
         Bm = tu_upload(ctx, b, (size_t)out), Y = dev_zeros(ctx, ny), DY = tu_upload(ctx, dy, ny),
         DX = tu_upload(ctx, dx0, nx), DW, DB;
  TU_OK(relcl_alloc(ctx, nw, &DW));
  TU_OK(relcl_alloc(ctx, (size_t)out, &DB));
  TU_OK(relcl_fill(ctx, B0(DW), 0.5f, nw));
  TU_OK(relcl_fill(ctx, B0(DB), 0.5f, (size_t)out));
  TU_OK(relcl_linear_forward(ctx, rows, in, out, B0(X), B0(Wm), bias ? B0(Bm) : RELCL_BUF_NONE,
                             B0(Y)));
  TU_OK(relcl_linear_backward(ctx, rows, in, out, B0(X), B0(Wm), B0(DY), B0(DX), acc, B0(DW),
                              B0(DB)));
  res[0] = tu_download(ctx, Y, ny);
  res[1] = tu_download(ctx, DX, nx);
  res[2] = tu_download(ctx, DW, nw);
  res[3] = tu_download(ctx, DB, (size_t)out);
  cl_mem all[] = {X, Wm, Bm, Y, DY, DX, DW, DB};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
}

static void check_linear(relcl_context *ctx, const layer_case *c) {
  const int rows = c->a, in = c->b, out = c->c, bias = c->flag & 1, acc = c->flag & 2;
  const size_t nx = (size_t)rows * in, nw = (size_t)out * in, ny = (size_t)rows * out;
  float *x = tu_alloc_host(nx), *w = tu_alloc_host(nw), *b = tu_alloc_host((size_t)out),
        *dy = tu_alloc_host(ny), *dx0 = tu_alloc_host(nx);
  tu_fill(x, nx, 41), tu_fill(w, nw, 42), tu_fill(b, (size_t)out, 43), tu_fill(dy, ny, 44);
  tu_fill(dx0, nx, 45);
  double *y = calloc(ny, 8), *dx = calloc(nx, 8), *dw = calloc(nw, 8), *db = calloc((size_t)out, 8);
  ref_linear_forward(rows, in, out, x, w, bias ? b : NULL, y);
  ref_linear_backward(rows, in, out, x, w, dy, dx, dw, db);
  if (acc)
    for (size_t i = 0; i < nx; i++) dx[i] += dx0[i];
  for (size_t i = 0; i < nw; i++) dw[i] += 0.5; /* parameter gradients accumulate onto 0.5 */
  for (int i = 0; i < out; i++) db[i] += 0.5;
  float *res[2][4];
  for (int run = 0; run < 2; run++)
    linear_run(ctx, rows, in, out, bias, acc, x, w, b, dy, dx0, res[run]);
  /* a third run with every operand at an offset: 128 elements (512 bytes, where a
   * sub-buffer can start on every device relcl knows, so CLBlast reads it in place) or an odd
   * one (where none can, so CLBlast copies it) */
  {
    const size_t ox = 128, ow = 7, ob = 3, oy = 256, ody = 5, odx = 128, odw = 384, odb = 1;
    cl_mem X = upload_at(ctx, x, nx, ox), Wm = upload_at(ctx, w, nw, ow),
           Bm = upload_at(ctx, b, (size_t)out, ob), Y = upload_at(ctx, dy, ny, oy),
           DY = upload_at(ctx, dy, ny, ody), DX = upload_at(ctx, dx0, nx, odx), DW, DB;
    const size_t nhalf = nw > (size_t)out ? nw : (size_t)out;
    float *half = tu_alloc_host(nhalf);
    for (size_t i = 0; i < nhalf; i++) half[i] = 0.5f;
    DW = upload_at(ctx, half, nw, odw);
    DB = upload_at(ctx, half, (size_t)out, odb);
    TU_OK(relcl_linear_forward(ctx, rows, in, out, relcl_buf_at(X, ox), relcl_buf_at(Wm, ow),
                               bias ? relcl_buf_at(Bm, ob) : RELCL_BUF_NONE,
                               relcl_buf_at(Y, oy)));
    TU_OK(relcl_linear_backward(ctx, rows, in, out, relcl_buf_at(X, ox), relcl_buf_at(Wm, ow),
                                relcl_buf_at(DY, ody), relcl_buf_at(DX, odx), acc,
                                relcl_buf_at(DW, odw), relcl_buf_at(DB, odb)));
    float *got[4] = {download_at(ctx, Y, ny, oy), download_at(ctx, DX, nx, odx),
                     download_at(ctx, DW, nw, odw), download_at(ctx, DB, (size_t)out, odb)};
    const double *want[4] = {y, dx, dw, db};
    const size_t len[4] = {ny, nx, nw, (size_t)out};
    double worst = 0;
    for (int i = 0; i < 4; i++) {
      double ei = tu_rel_err(got[i], want[i], len[i], 1e-2);
      worst = tu_worse(worst, ei);
      free(got[i]);
    }
    tu_check(worst < 2e-5, "%-28s operands at offsets 128/odd: worst rel err %.2e", c->name,
             worst);
    cl_mem all[] = {X, Wm, Bm, Y, DY, DX, DW, DB};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
    free(half);
  }
  double e;
  e = tu_rel_err(res[0][0], y, ny, 1e-2);
  tu_check(e < 2e-5, "%-28s y      rel err %.2e", c->name, e);
  e = tu_rel_err(res[0][1], dx, nx, 1e-2);
  tu_check(e < 2e-5, "%-28s dx     rel err %.2e", c->name, e);
  e = tu_rel_err(res[0][2], dw, nw, 1e-2);
  tu_check(e < 2e-5, "%-28s dW     rel err %.2e", c->name, e);
  e = tu_rel_err(res[0][3], db, (size_t)out, 1e-2);
  tu_check(e < 2e-5, "%-28s db     rel err %.2e", c->name, e);
  tu_check(same_bits(res[0][0], res[1][0], ny) && same_bits(res[0][1], res[1][1], nx) &&
               same_bits(res[0][2], res[1][2], nw) && same_bits(res[0][3], res[1][3], (size_t)out),
           "%-28s bitwise identical on a second run", c->name);
  if (copies) { /* gemm_cpu_at: the bits of the transposed copies it replaces */
    float *cp[4];
    linear_run(copies, rows, in, out, bias, acc, x, w, b, dy, dx0, cp);
    tu_check(same_bits(res[0][2], cp[2], nw), "%-28s dW: the bits of RELCL_WGRAD=copy",
             c->name);
    tu_check(same_bits(res[0][3], cp[3], (size_t)out), "%-28s db: the bits of RELCL_WGRAD=copy",
             c->name);
    for (int i = 0; i < 4; i++) free(cp[i]);
  }
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 4; i++) free(res[r][i]);
  free(x), free(w), free(b), free(dy), free(dx0), free(y), free(dx), free(dw), free(db);
}

/* ---- relu, residual add, axpby ---- */

static void check_elementwise(relcl_context *ctx, const layer_case *c) {
  const size_t n = (size_t)c->a;
  float *x = tu_alloc_host(n), *r = tu_alloc_host(n), *dy = tu_alloc_host(n);
  tu_fill(x, n, 51), tu_fill(r, n, 52), tu_fill(dy, n, 53);
  if (n > 3) x[3] = 0.0f; /* ReLU's kink: the gradient there is 0 */
  cl_mem X = tu_upload(ctx, x, n), R = tu_upload(ctx, r, n), DY = tu_upload(ctx, dy, n),
         Y = dev_zeros(ctx, n), DX = dev_zeros(ctx, n), S = dev_zeros(ctx, n),
         Z = tu_upload(ctx, r, n);
  TU_OK(relcl_relu_forward(ctx, n, B0(X), B0(Y)));
  TU_OK(relcl_relu_backward(ctx, n, B0(Y), B0(DY), B0(DX)));
  TU_OK(relcl_residual_add(ctx, n, B0(X), B0(R), B0(S)));
  TU_OK(relcl_vec_axpby(ctx, n, 0.5f, B0(X), -2.0f, B0(Z)));
  float *y = tu_download(ctx, Y, n), *dx = tu_download(ctx, DX, n), *s = tu_download(ctx, S, n),
        *z = tu_download(ctx, Z, n);
  int ok_relu = 1, ok_add = 1, ok_axpby = 1;
  for (size_t i = 0; i < n; i++) {
    ok_relu &= y[i] == (x[i] > 0.0f ? x[i] : 0.0f) && dx[i] == (x[i] > 0.0f ? dy[i] : 0.0f);
    ok_add &= s[i] == x[i] + r[i];
    float want = 0.5f * x[i];
    want = want + -2.0f * r[i];
    ok_axpby &= z[i] == want;
  }
  tu_check(ok_relu, "%-28s relu forward and backward exact", c->name);
  tu_check(ok_add, "%-28s residual add exact", c->name);
  tu_check(ok_axpby, "%-28s axpby exact", c->name);
  cl_mem all[] = {X, R, DY, Y, DX, S, Z};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
  free(x), free(r), free(dy), free(y), free(dx), free(s), free(z);
}

/* ---- gemm.c's transpose ---- */

/* x (rows x cols, leading dimension cols + extra) at offset 5 of its buffer, transposed to
 * offset 3 of one whose leading dimension is rows + 2: every entry exact, and the
 * entries around and between the output's rows untouched (a sentinel). */
static void check_transpose(relcl_context *ctx, const layer_case *c) {
  const size_t rows = (size_t)c->a, cols = (size_t)c->b, ld = cols + (size_t)c->c;
  const size_t ld_out = rows + 2, nx = 5 + rows * ld, ny = 3 + cols * ld_out + 4;
  const float sentinel = -7.25f;
  float *x = tu_alloc_host(nx), *y0 = tu_alloc_host(ny);
  tu_fill(x, nx, 91);
  for (size_t i = 0; i < ny; i++) y0[i] = sentinel;
  cl_mem X = tu_upload(ctx, x, nx), Y = tu_upload(ctx, y0, ny);
  TU_OK(relcl__transpose(ctx, relcl_buf_at(X, 5), rows, cols, ld, relcl_buf_at(Y, 3), ld_out));
  float *y = tu_download(ctx, Y, ny);
  size_t wrong = 0, touched = 0;
  for (size_t i = 0; i < ny; i++) {
    const size_t o = i - 3, cc = o / ld_out, r = o % ld_out;
    if (i >= 3 && cc < cols && r < rows)
      wrong += y[i] != x[5 + r * ld + cc];
    else
      touched += y[i] != sentinel;
  }
  tu_check(wrong == 0, "%-28s every entry exact (%zu wrong)", c->name, wrong);
  tu_check(touched == 0, "%-28s nothing else written (%zu entries)", c->name, touched);
  release(X), release(Y);
  free(x), free(y0), free(y);
}

/* C_e = alpha op(A_e) op(B_e) + beta C_e for three entries e, against test/ref, with every
 * layout freedom the wrapper has: operands at offsets, leading dimensions past their rows,
 * entries apart by more than their size. Entries are sums of k products of values in
 * [-1, 1): float's rounding error grows about as sqrt(k) 2^-24 of the terms' size (1e-7 of
 * the output's scale here); an index or edge mistake is of the output's own size. With beta
 * 0, C holds NaN first (BLAS: C is not read); the gaps hold a sentinel that must stay. */
static void check_batched(relcl_context *ctx, const layer_case *c) {
  const int ta = c->flag & 1, tb = (c->flag & 2) != 0, full = (c->flag & 4) != 0;
  /* flag 64: C in the heads' layout, product e at (e / 3) sc + (e % 3) n, two groups of 3 */
  const size_t heads = c->flag & 64 ? 3 : 1;
  const size_t m = (size_t)c->a, n = (size_t)c->b, k = (size_t)c->c;
  const size_t batch = c->flag & 8 ? 1 : 3 * (heads > 1 ? 2 : 1), groups = batch / heads;
  const size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = heads * n + 2;
  const size_t sa = (ta ? k : m) * lda + 7, sb = (tb ? n : k) * ldb + 5, sc = m * ldc + 3;
  const size_t na = 5 + batch * sa, nb = 11 + batch * sb, nc = 2 + groups * sc;
  /* the second term (flag 16): A2 m x k2 at 4, B2 k2 x n at 6, shared with flag 32 */
  const size_t k2 = c->flag & 16 ? (size_t)c->f : 0, lda2 = k2 + 2, ldb2 = n + 3;
  const size_t sa2 = m * lda2 + 3, sb2 = c->flag & 32 ? 0 : k2 * ldb2 + 1;
  const size_t na2 = 4 + batch * sa2, nb2 = 6 + (batch - 1) * sb2 + k2 * ldb2;
  const float alpha = full ? -0.5f : 1.0f, beta = full ? 0.75f : 0.0f, sentinel = -7.25f;
  float *a = tu_alloc_host(na), *b = tu_alloc_host(nb), *c0 = tu_alloc_host(nc);
  float *a2 = tu_alloc_host(na2), *b2 = tu_alloc_host(nb2);
  double *want = calloc(nc, sizeof *want);
  tu_fill(a, na, 101), tu_fill(b, nb, 102), tu_fill(c0, nc, 103);
  tu_fill(a2, na2, 104), tu_fill(b2, nb2, 105);
  for (size_t i = 0; i < nc; i++) { /* the entries' C: random (beta != 0) or NaN */
    const size_t o = i - 2, r = o % sc / ldc, col = o % sc % ldc;
    const int inside = i >= 2 && o / sc < groups && r < m && col < heads * n;
    if (!inside) c0[i] = sentinel;
    else if (!full) c0[i] = NAN;
    want[i] = c0[i];
  }
  for (size_t e = 0; e < batch; e++) { /* product e, its C where the layout puts it */
    double *ce = want + 2 + e / heads * sc + e % heads * n;
    ref_gemm_batched(ta, tb, (int)m, (int)n, (int)k, alpha, a + 5 + e * sa, (int)lda, 0,
                     b + 11 + e * sb, (int)ldb, 0, beta, ce, (int)ldc, 0, 1);
    if (k2 > 0)
      ref_gemm_batched(0, 0, (int)m, (int)n, (int)k2, alpha, a2 + 4 + e * sa2, (int)lda2, 0,
                       b2 + 6 + e * sb2, (int)ldb2, 0, 1.0, ce, (int)ldc, 0, 1);
  }
  float *got[2];
  for (int run = 0; run < 2; run++) {
    cl_mem A = tu_upload(ctx, a, na), B = tu_upload(ctx, b, nb), C = tu_upload(ctx, c0, nc);
    cl_mem A2 = tu_upload(ctx, a2, na2), B2 = tu_upload(ctx, b2, nb2);
    if (k2 > 0 || heads > 1) {
      const relcl__gemm_term t2 = {k2, relcl_buf_at(A2, 4), lda2, sa2, relcl_buf_at(B2, 6), ldb2,
                                   sb2};
      TU_OK(relcl__gemm_plus(ctx, RELCL_PART_CONTENT_GEMM, ta, m, n, k, alpha,
                             relcl_buf_at(A, 5), lda, sa, relcl_buf_at(B, 11), ldb, sb,
                             k2 > 0 ? &t2 : NULL, RELCL_PART_RELATIVE_GEMM, beta,
                             relcl_buf_at(C, 2), ldc, sc, heads, n, batch));
    } else {
      TU_OK(relcl__gemm(ctx, ta, tb, m, n, k, alpha, relcl_buf_at(A, 5), lda, sa,
                        relcl_buf_at(B, 11), ldb, sb, beta, relcl_buf_at(C, 2), ldc, sc, batch));
    }
    got[run] = tu_download(ctx, C, nc);
    release(A), release(B), release(C), release(A2), release(B2);
  }
  size_t touched = 0;
  for (size_t i = 0; i < nc; i++)
    if (want[i] == sentinel) touched += got[0][i] != sentinel;
  const double err = tu_rel_err(got[0], want, nc, 1.0);
  tu_check(err < 1e-5, "%-28s vs reference: rel err %.2e", c->name, err);
  tu_check(touched == 0, "%-28s nothing else written (%zu entries)", c->name, touched);
  tu_check(memcmp(got[0], got[1], nc * sizeof(float)) == 0, "%-28s the same bits twice",
           c->name);
  free(a), free(b), free(c0), free(a2), free(b2), free(want), free(got[0]), free(got[1]);
}

/* relcl_fill of n floats at an offset, 8 guard floats on each side untouched */
static void check_fill(relcl_context *ctx, const layer_case *c) {
  const size_t n = (size_t)c->a, off = 8 + (size_t)c->b, total = off + n + 8;
  const float sentinel = -7.25f, value = 2.5f;
  float *init = tu_alloc_host(total);
  for (size_t i = 0; i < total; i++) init[i] = sentinel;
  cl_mem X = tu_upload(ctx, init, total);
  TU_OK(relcl_fill(ctx, relcl_buf_at(X, off), value, n));
  float *got = tu_download(ctx, X, total);
  size_t wrong = 0, touched = 0;
  for (size_t i = 0; i < total; i++) {
    const int inside = i >= off && i < off + n;
    wrong += inside && got[i] != value;
    touched += !inside && got[i] != sentinel;
  }
  tu_check(wrong == 0 && touched == 0, "%-28s every element (%zu wrong), nothing else (%zu)",
           c->name, wrong, touched);
  release(X);
  free(init), free(got);
}

/* B sequences of n rows; the forward's in, and parts x heads x dh outputs (the public
 * relcl_linear_forward_heads); the backward's
 * out (its in is heads x dh). gemm_cpu's store writes the heads layout where dh is a multiple
 * of its blocks' 2 W columns (16 with AVX2, 8 with SSE, 32 with AVX-512), else relcl
 * splits the product from scratch: dh 16 in the store but with AVX-512, dh 12 never; rows
 * not a multiple of gemm_cpu's 6 or 8, so that a block of rows crosses sequences. */
static const struct {
  int B, n, in, parts, heads, dh, bias, out;
} split_cases[] = {
    {3, 5, 24, 1, 3, 16, 1, 24},
    {2, 33, 40, 3, 4, 64, 1, 20},
    {3, 7, 9, 2, 2, 12, 0, 10},
    {4, 13, 64, 1, 2, 32, 1, 33},
    {1, 70, 17, 2, 1, 32, 1, 7},
};

/* x (rows x cols, as a linear layer writes it) in the heads layout of relcl__heads_split */
static void split_ref(const double *x, size_t B, size_t n, size_t cols, size_t H, size_t dh,
                      double *out) {
  const size_t rows = B * n, parts = cols / (H * dh);
  for (size_t q = 0; q < parts; q++)
    for (size_t b = 0; b < B; b++)
      for (size_t h = 0; h < H; h++)
        for (size_t i = 0; i < n; i++)
          for (size_t e = 0; e < dh; e++)
            out[q * rows * H * dh + ((b * H + h) * n + i) * dh + e] =
                x[(b * n + i) * cols + (q * H + h) * dh + e];
}

static void check_linear_heads(relcl_context *ctx, const layer_case *c) {
  const int B = split_cases[c->a].B, n = split_cases[c->a].n, in = split_cases[c->a].in;
  const int H = split_cases[c->a].heads, dh = split_cases[c->a].dh;
  const int out = split_cases[c->a].parts * H * dh, bias = split_cases[c->a].bias;
  const int rows = B * n, bout = split_cases[c->a].out, bin = H * dh; /* the backward's */
  const size_t nx = (size_t)rows * in, nw = (size_t)out * in, ny = (size_t)rows * out;
  const size_t nbx = (size_t)rows * bin, nbw = (size_t)bout * bin, nby = (size_t)rows * bout;
  const size_t guard = 8;
  const float sentinel = -7.25f;
  float *x = tu_alloc_host(nx), *w = tu_alloc_host(nw), *b = tu_alloc_host((size_t)out);
  float *bx = tu_alloc_host(nbx), *bw = tu_alloc_host(nbw), *dy = tu_alloc_host(nby);
  float *init = tu_alloc_host((ny > nbx ? ny : nbx) + guard);
  tu_fill(x, nx, 71), tu_fill(w, nw, 72), tu_fill(b, (size_t)out, 73);
  tu_fill(bx, nbx, 74), tu_fill(bw, nbw, 75), tu_fill(dy, nby, 76);
  for (size_t i = 0; i < (ny > nbx ? ny : nbx) + guard; i++) init[i] = sentinel;
  double *y = calloc(ny, 8), *ys = calloc(ny, 8), *dx = calloc(nbx, 8), *dxs = calloc(nbx, 8);
  double *dw = calloc(nbw, 8), *db = calloc((size_t)bout, 8);
  ref_linear_forward(rows, in, out, x, w, bias ? b : NULL, y);
  ref_linear_backward(rows, bin, bout, bx, bw, dy, dx, dw, db);
  split_ref(y, (size_t)B, (size_t)n, (size_t)out, (size_t)H, (size_t)dh, ys);
  split_ref(dx, (size_t)B, (size_t)n, (size_t)bin, (size_t)H, (size_t)dh, dxs);
  float *got[2][4];
  for (int run = 0; run < 2; run++) {
    cl_mem X = tu_upload(ctx, x, nx), Wm = tu_upload(ctx, w, nw),
           Bm = tu_upload(ctx, b, (size_t)out), Y = tu_upload(ctx, init, ny + guard);
    cl_mem BX = tu_upload(ctx, bx, nbx), BW = tu_upload(ctx, bw, nbw),
           DY = tu_upload(ctx, dy, nby), DX = tu_upload(ctx, init, nbx + guard), DW, DB;
    TU_OK(relcl_alloc(ctx, nbw, &DW));
    TU_OK(relcl_alloc(ctx, (size_t)bout, &DB));
    TU_OK(relcl_fill(ctx, B0(DW), 0.0f, nbw));
    TU_OK(relcl_fill(ctx, B0(DB), 0.0f, (size_t)bout));
    TU_OK(relcl_linear_forward_heads(ctx, B, n, in, out, H, dh, B0(X), B0(Wm),
                                     bias ? B0(Bm) : RELCL_BUF_NONE, B0(Y)));
    TU_OK(relcl__linear_backward_heads(ctx, rows, bin, bout, B0(BX), B0(BW), B0(DY), B0(DX), n,
                                       H, dh, B0(DW), B0(DB)));
    got[run][0] = tu_download(ctx, Y, ny + guard);
    got[run][1] = tu_download(ctx, DX, nbx + guard);
    got[run][2] = tu_download(ctx, DW, nbw);
    got[run][3] = tu_download(ctx, DB, (size_t)bout);
    cl_mem all[] = {X, Wm, Bm, Y, BX, BW, DY, DX, DW, DB};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
  }
  size_t touched = 0;
  for (size_t i = 0; i < guard; i++)
    touched += (got[0][0][ny + i] != sentinel) + (got[0][1][nbx + i] != sentinel);
  const double ey = tu_rel_err(got[0][0], ys, ny, 1e-2), ex = tu_rel_err(got[0][1], dxs, nbx, 1e-2);
  const double ew = tu_rel_err(got[0][2], dw, nbw, 1e-2);
  const double eb = tu_rel_err(got[0][3], db, (size_t)bout, 1e-2);
  tu_check(ey < 1e-5, "%-28s y in the heads layout: rel err %.2e", c->name, ey);
  tu_check(ex < 1e-5, "%-28s dx in the heads layout: rel err %.2e", c->name, ex);
  tu_check(ew < 1e-5 && eb < 1e-5, "%-28s dW, db rel err %.2e, %.2e", c->name, ew, eb);
  tu_check(touched == 0, "%-28s nothing written past y and dx (%zu)", c->name, touched);
  int same = 1;
  const size_t len[4] = {ny + guard, nbx + guard, nbw, (size_t)bout};
  for (int i = 0; i < 4; i++) same &= memcmp(got[0][i], got[1][i], len[i] * 4) == 0;
  tu_check(same, "%-28s bitwise identical on a second run", c->name);
  for (int run = 0; run < 2; run++)
    for (int i = 0; i < 4; i++) free(got[run][i]);
  free(x), free(w), free(b), free(bx), free(bw), free(dy), free(init);
  free(y), free(ys), free(dx), free(dxs), free(dw), free(db);
}

/* dx = (dy W) where x > 0, else 0, dW += dy^T x, db += column sums of dy
 * (relcl__relu_linear_backward), against test/ref's linear backward masked here by the
 * formula; x is a ReLU's output, about half of it exactly 0. dx holds NaN first (it is
 * overwritten). */
static void check_relu_linear(relcl_context *ctx, const layer_case *c) {
  const int rows = c->a, in = c->b, out = c->c;
  const size_t nx = (size_t)rows * in, nw = (size_t)out * in, ny = (size_t)rows * out;
  float *x = tu_alloc_host(nx), *w = tu_alloc_host(nw), *dy = tu_alloc_host(ny),
        *nan = tu_alloc_host(nx);
  tu_fill(x, nx, 61), tu_fill(w, nw, 62), tu_fill(dy, ny, 63);
  size_t zeros = 0;
  for (size_t i = 0; i < nx; i++) {
    if (x[i] < 0.0f) x[i] = 0.0f, zeros++;
    nan[i] = NAN;
  }
  double *dx = calloc(nx, 8), *dw = calloc(nw, 8), *db = calloc((size_t)out, 8);
  ref_linear_backward(rows, in, out, x, w, dy, dx, dw, db);
  for (size_t i = 0; i < nx; i++)
    if (!(x[i] > 0.0f)) dx[i] = 0.0;
  for (size_t i = 0; i < nw; i++) dw[i] += 0.5;
  for (int i = 0; i < out; i++) db[i] += 0.5;
  float *got[2][3];
  for (int run = 0; run < 2; run++) {
    cl_mem X = tu_upload(ctx, x, nx), Wm = tu_upload(ctx, w, nw), DY = tu_upload(ctx, dy, ny),
           DX = tu_upload(ctx, nan, nx), DW, DB;
    TU_OK(relcl_alloc(ctx, nw, &DW));
    TU_OK(relcl_alloc(ctx, (size_t)out, &DB));
    TU_OK(relcl_fill(ctx, B0(DW), 0.5f, nw));
    TU_OK(relcl_fill(ctx, B0(DB), 0.5f, (size_t)out));
    TU_OK(relcl__relu_linear_backward(ctx, rows, in, out, B0(X), B0(Wm), B0(DY), B0(DX),
                                      (size_t)in, B0(DW), B0(DB)));
    got[run][0] = tu_download(ctx, DX, nx);
    got[run][1] = tu_download(ctx, DW, nw);
    got[run][2] = tu_download(ctx, DB, (size_t)out);
    cl_mem all[] = {X, Wm, DY, DX, DW, DB};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
  }
  size_t kept_zero = 0; /* dx where x is 0 must be exactly 0 */
  for (size_t i = 0; i < nx; i++) kept_zero += x[i] == 0.0f && got[0][0][i] != 0.0f;
  tu_check(zeros > nx / 4 && kept_zero == 0, "%-28s dx 0 at all %zu zeros of x", c->name, zeros);
  tu_check(tu_rel_err(got[0][0], dx, nx, 1e-2) < 1e-5, "%-28s dx     rel err %.2e", c->name,
           tu_rel_err(got[0][0], dx, nx, 1e-2));
  tu_check(tu_rel_err(got[0][1], dw, nw, 1e-2) < 1e-5, "%-28s dW     rel err %.2e", c->name,
           tu_rel_err(got[0][1], dw, nw, 1e-2));
  tu_check(tu_rel_err(got[0][2], db, (size_t)out, 1e-2) < 1e-5, "%-28s db     rel err %.2e",
           c->name, tu_rel_err(got[0][2], db, (size_t)out, 1e-2));
  int same = 1;
  for (int i = 0; i < 3; i++)
    same &= memcmp(got[0][i], got[1][i], (i == 0 ? nx : i == 1 ? nw : (size_t)out) * 4) == 0;
  tu_check(same, "%-28s bitwise identical on a second run", c->name);
  for (int run = 0; run < 2; run++)
    for (int i = 0; i < 3; i++) free(got[run][i]);
  free(x), free(w), free(dy), free(nan), free(dx), free(dw), free(db);
}

/* The feed-forward as the model's graph runs it with the hidden's rows ld = c + flag floats
 * apart: h = relu(x W1^T + b1) (relcl__linear_relu_forward), y = h W2^T
 * (relcl__linear_forward_ld), dh = (dy W2) where h > 0 with dW2, db2
 * (relcl__relu_linear_backward), dx = dh W1 with dW1, db1 (relcl__linear_backward_ld),
 * against test/ref on h's rows as one after the other; h's padding holds NaN and must keep
 * it (nothing is written past a row's c floats). */
static void check_ffn_ld(relcl_context *ctx, const layer_case *c) {
  const int rows = c->a, D = c->b, F = c->c;
  const size_t ld = (size_t)F + (size_t)c->flag, R = (size_t)rows;
  const size_t nx = R * D, nw = (size_t)F * D, nh = R * F, np = R * ld;
  float *x = tu_alloc_host(nx), *w1 = tu_alloc_host(nw), *b1 = tu_alloc_host((size_t)F),
        *w2 = tu_alloc_host(nw), *dy = tu_alloc_host(nx), *nan = tu_alloc_host(np),
        *hf = tu_alloc_host(nh), *dhf = tu_alloc_host(nh);
  tu_fill(x, nx, 71), tu_fill(w1, nw, 72), tu_fill(b1, (size_t)F, 73), tu_fill(w2, nw, 74);
  tu_fill(dy, nx, 75);
  for (size_t i = 0; i < np; i++) nan[i] = NAN;
  double *h = calloc(nh, 8), *y = calloc(nx, 8), *dh = calloc(nh, 8), *dw2 = calloc(nw, 8),
         *db2 = calloc((size_t)D, 8), *dx = calloc(nx, 8), *dw1 = calloc(nw, 8),
         *db1 = calloc((size_t)F, 8);
  ref_linear_forward(rows, D, F, x, w1, b1, h);
  for (size_t i = 0; i < nh; i++) h[i] = h[i] > 0.0 ? h[i] : 0.0, hf[i] = (float)h[i];
  ref_linear_forward(rows, F, D, hf, w2, NULL, y);
  ref_linear_backward(rows, F, D, hf, w2, dy, dh, dw2, db2);
  for (size_t i = 0; i < nh; i++) dh[i] = hf[i] > 0.0f ? dh[i] : 0.0, dhf[i] = (float)dh[i];
  ref_linear_backward(rows, D, F, x, w1, dhf, dx, dw1, db1);
  cl_mem X = tu_upload(ctx, x, nx), W1 = tu_upload(ctx, w1, nw),
         B1 = tu_upload(ctx, b1, (size_t)F), W2 = tu_upload(ctx, w2, nw),
         DY = tu_upload(ctx, dy, nx), H = tu_upload(ctx, nan, np), DH = tu_upload(ctx, nan, np),
         Y = dev_zeros(ctx, nx), DX = dev_zeros(ctx, nx), DW1 = dev_zeros(ctx, nw),
         DB1 = dev_zeros(ctx, (size_t)F), DW2 = dev_zeros(ctx, nw), DB2 = dev_zeros(ctx, (size_t)D);
  TU_OK(relcl__linear_relu_forward(ctx, rows, D, F, B0(X), B0(W1), B0(B1), B0(H), ld));
  TU_OK(relcl__linear_forward_ld(ctx, rows, F, D, B0(H), ld, B0(W2), RELCL_BUF_NONE, B0(Y)));
  TU_OK(relcl__relu_linear_backward(ctx, rows, F, D, B0(H), B0(W2), B0(DY), B0(DH), ld, B0(DW2),
                                    B0(DB2)));
  TU_OK(relcl__linear_backward_ld(ctx, rows, D, F, B0(X), B0(W1), B0(DH), ld, B0(DX), 0,
                                  B0(DW1), B0(DB1)));
  float *gh = tu_download(ctx, H, np), *gdh = tu_download(ctx, DH, np);
  size_t pad_kept = 0;
  for (size_t r = 0; r < R; r++) {
    for (size_t j = (size_t)F; j < ld; j++) pad_kept += isnan(gh[r * ld + j]) != 0;
    memmove(gh + r * F, gh + r * ld, (size_t)F * 4); /* rows one after the other */
    memmove(gdh + r * F, gdh + r * ld, (size_t)F * 4);
  }
  tu_check(pad_kept == R * (ld - (size_t)F), "%-28s h's padding untouched (%zu of %zu)",
           c->name, pad_kept, R * (ld - (size_t)F));
  const struct {
    const char *what;
    cl_mem m;
    float *got;
    const double *want;
    size_t n;
  } outs[] = {{"h", NULL, gh, h, nh},
              {"y", Y, NULL, y, nx},
              {"dh", NULL, gdh, dh, nh},
              {"dW2", DW2, NULL, dw2, nw},
              {"db2", DB2, NULL, db2, (size_t)D},
              {"dx", DX, NULL, dx, nx},
              {"dW1", DW1, NULL, dw1, nw},
              {"db1", DB1, NULL, db1, (size_t)F}};
  for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) {
    float *got = outs[i].got ? outs[i].got : tu_download(ctx, outs[i].m, outs[i].n);
    const double e = tu_rel_err(got, outs[i].want, outs[i].n, 1e-2);
    tu_check(e < 1e-5, "%-28s %-6s rel err %.2e", c->name, outs[i].what, e);
    if (!outs[i].got) free(got);
  }
  cl_mem all[] = {X, W1, B1, W2, DY, H, DH, Y, DX, DW1, DB1, DW2, DB2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
  free(gh), free(gdh), free(x), free(w1), free(b1), free(w2), free(dy), free(nan), free(hf);
  free(dhf), free(h), free(y), free(dh), free(dw2), free(db2), free(dx), free(dw1), free(db1);
}

/* ---- fused ops of the model's graph ---- */

static void check_fused(relcl_context *ctx, const layer_case *c) {
  const int rows = c->a, cols = c->b, in = c->c;
  const float p = c->f;
  const size_t n = (size_t)rows * cols, nx = (size_t)rows * in, nw = (size_t)cols * in;
  const uint64_t seed = 0x5eed0123456789ULL, stream = 4242;
  float *x = tu_alloc_host(n), *b = tu_alloc_host((size_t)cols), *r = tu_alloc_host(n),
        *want = tu_alloc_host(n), *lx = tu_alloc_host(nx), *lw = tu_alloc_host(nw);
  tu_fill(x, n, 61), tu_fill(b, (size_t)cols, 62), tu_fill(r, n, 63);
  tu_fill(lx, nx, 64), tu_fill(lw, nw, 65);
  ref_bias_dropout_residual(rows, cols, p, seed, stream, x, b, r, want);
  double *lin = calloc(n, sizeof *lin);
  ref_linear_forward(rows, in, cols, lx, lw, b, lin);
  size_t negative = 0;
  for (size_t i = 0; i < n; i++) {
    negative += lin[i] < 0.0;
    lin[i] = lin[i] > 0.0 ? lin[i] : 0.0; /* ReLU */
  }
  float *got[2], *hid[2];
  for (int run = 0; run < 2; run++) {
    cl_mem X = tu_upload(ctx, x, n), Bm = tu_upload(ctx, b, (size_t)cols),
           R = tu_upload(ctx, r, n), Y = dev_zeros(ctx, n), LX = tu_upload(ctx, lx, nx),
           LW = tu_upload(ctx, lw, nw), H = dev_zeros(ctx, n);
    TU_OK(relcl__bias_dropout_residual(ctx, rows, cols, p, seed, stream, B0(X), B0(Bm), B0(R),
                                       B0(Y), RELCL_BUF_NONE));
    TU_OK(relcl__linear_relu_forward(ctx, rows, in, cols, B0(LX), B0(LW), B0(Bm), B0(H),
                                     (size_t)cols));
    got[run] = tu_download(ctx, Y, n);
    hid[run] = tu_download(ctx, H, n);
    cl_mem all[] = {X, Bm, R, Y, LX, LW, H};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
  }
  tu_check(same_bits(got[0], want, n), "%-28s bias+dropout+residual bit-exact", c->name);
  double e = tu_rel_err(hid[0], lin, n, 1e-2);
  tu_check(e < 2e-5, "%-28s linear+relu rel err %.2e (%zu of %zu < 0)", c->name, e, negative,
           n);
  tu_check(same_bits(got[0], got[1], n) && same_bits(hid[0], hid[1], n),
           "%-28s bitwise identical on a second run", c->name);
  for (int i = 0; i < 2; i++) free(got[i]), free(hid[i]);
  free(x), free(b), free(r), free(want), free(lx), free(lw), free(lin);
}

/* ---- heads ---- */

/* parts = 1 through the public op; parts = 3 (Q|K|V side by side, as the model's graph moves
 * them in one launch) through the internal one. */
static void check_heads_parts(relcl_context *ctx, const layer_case *c, int P) {
  const int B = c->a, n = c->b, H = c->c, dh = (int)c->f, ld = P * H * dh + c->flag;
  const int off = 3; /* start the heads at column 3 of the strided matrix */
  const size_t nd = (size_t)B * n * H * dh, ns = (size_t)B * n * ld + off;
  float *x = tu_alloc_host(ns);
  tu_fill(x, ns, 61);
  cl_mem X = tu_upload(ctx, x, ns), Y = dev_zeros(ctx, P * nd), Z = dev_zeros(ctx, ns);
  if (P == 1) {
    TU_OK(relcl_heads_split(ctx, B, n, H, dh, relcl_buf_at(X, off), ld, B0(Y)));
    TU_OK(relcl_heads_merge(ctx, B, n, H, dh, B0(Y), relcl_buf_at(Z, off), ld));
  } else {
    TU_OK(relcl__heads_split(ctx, P, B, n, H, dh, relcl_buf_at(X, off), ld, B0(Y)));
    TU_OK(relcl__heads_merge(ctx, P, B, n, H, dh, B0(Y), relcl_buf_at(Z, off), ld));
  }
  float *y = tu_download(ctx, Y, P * nd), *z = tu_download(ctx, Z, ns);
  int ok_split = 1, ok_merge = 1;
  /* part q, head h of row (b, t) is at columns (q H + h) dh of x; in y, tensor q of P */
  for (int q = 0; q < P; q++)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < H; h++)
        for (int t = 0; t < n; t++)
          for (int e = 0; e < dh; e++)
            ok_split &= y[q * nd + (((size_t)b * H + h) * n + t) * dh + e] ==
                        x[off + ((size_t)b * n + t) * ld + ((size_t)q * H + h) * dh + e];
  for (size_t i = 0; i < ns; i++) {
    size_t col = (i - off + (size_t)ld) % (size_t)ld; /* entries outside the heads stay 0 */
    int inside = i >= (size_t)off && col < (size_t)P * H * dh;
    ok_merge &= z[i] == (inside ? x[i] : 0.0f);
  }
  tu_check(ok_split, "%-28s split exact (%d parts)", c->name, P);
  tu_check(ok_merge, "%-28s merge(split(x)) == x, other columns untouched (%d parts)", c->name,
           P);
  release(X), release(Y), release(Z);
  free(x), free(y), free(z);
}

static void check_heads(relcl_context *ctx, const layer_case *c) {
  check_heads_parts(ctx, c, 1);
  check_heads_parts(ctx, c, 3);
}

/* ---- colsum and sumsq ---- */

static void check_colsum(relcl_context *ctx, const layer_case *c) {
  const int rows = c->a, cols = c->b, ld = cols + (c->flag & 63), acc = (c->flag & 64) != 0;
  const size_t n = (size_t)rows * ld;
  float *x = tu_alloc_host(n);
  tu_fill(x, n, 71);
  double *y = calloc((size_t)cols, 8);
  ref_colsum(rows, cols, x, ld, y);
  if (acc)
    for (int i = 0; i < cols; i++) y[i] += 1.0;
  float *res[2];
  for (int run = 0; run < 2; run++) {
    cl_mem X = tu_upload(ctx, x, n), Y;
    TU_OK(relcl_alloc(ctx, (size_t)cols, &Y));
    TU_OK(relcl_fill(ctx, B0(Y), acc ? 1.0f : 123.0f, (size_t)cols));
    TU_OK(relcl_colsum(ctx, rows, cols, B0(X), ld, B0(Y), acc));
    res[run] = tu_download(ctx, Y, (size_t)cols);
    release(X), release(Y);
  }
  double e = tu_rel_err(res[0], y, (size_t)cols, 1e-2);
  tu_check(e < 2e-5, "%-28s rel err %.2e", c->name, e);
  tu_check(same_bits(res[0], res[1], (size_t)cols), "%-28s bitwise identical on a second run",
           c->name);
  /* the order every shape and path sums in (lib/ops/layers.c: chunks of 64 rows, each in row
   * order, then the chunks in order, then the accumulation), in float: the same bits whether
   * one launch (colsum_rows, CPUs) or two (colsum_partial, colsum_finish) sum them */
  float *order = tu_alloc_host((size_t)cols);
  for (int j = 0; j < cols; j++) {
    float t = 0.0f;
    for (int r0 = 0; r0 < rows; r0 += 64) {
      float s = 0.0f;
      for (int r = r0; r < rows && r < r0 + 64; r++) s += x[(size_t)r * ld + j];
      t += s;
    }
    order[j] = acc ? 1.0f + t : t;
  }
  tu_check(same_bits(res[0], order, (size_t)cols), "%-28s the bits of 64-row chunks in order",
           c->name);
  free(order), free(res[0]), free(res[1]), free(x), free(y);
}

static void check_sumsq(relcl_context *ctx, const layer_case *c) {
  const size_t n = (size_t)c->a;
  float *x = tu_alloc_host(n);
  tu_fill(x, n, 81);
  double want = ref_sumsq(n, x);
  float got[2];
  for (int run = 0; run < 2; run++) {
    cl_mem X = tu_upload(ctx, x, n), S = dev_zeros(ctx, 4);
    TU_OK(relcl_sumsq(ctx, n, B0(X), relcl_buf_at(S, 1)));
    TU_OK(relcl_read(ctx, relcl_buf_at(S, 1), &got[run], 1));
    release(X), release(S);
  }
  double e = fabs(got[0] - want) / want;
  tu_check(e < 2e-5, "%-28s rel err %.2e", c->name, e);
  tu_check(same_bits(&got[0], &got[1], 1), "%-28s bitwise identical on a second run", c->name);
  free(x);
}

/* ---- cross-entropy ---- */

static void check_xent(relcl_context *ctx, const layer_case *c) {
  const int rows = c->a, V = c->b, in_place = c->flag & 1;
  const float scale = (c->flag & 4) ? 0.5f : 1.0f;
  const size_t n = (size_t)rows * V;
  float *z = tu_alloc_host(n);
  tu_fill(z, n, 91);
  if (c->flag & 2) /* logits of +-100: exp overflows unless the max is subtracted */
    for (size_t i = 0; i < n; i++) z[i] *= 100.0f;
  if (c->flag & 16) /* row r's logit r at 200, the rest within +-1: only the true maximum
                     * keeps exp finite, wherever it falls (every lane of a vector, the tail) */
    for (int r = 0; r < rows; r++) z[(size_t)r * V + (size_t)(r % V)] = 200.0f;
  int32_t *t = calloc((size_t)rows, 4);
  uint64_t s = 92;
  for (int r = 0; r < rows; r++) t[r] = (int32_t)(1 + tu_next(&s) % (uint64_t)(V - 1));
  if (rows > 2) t[1] = 0;      /* padding: ignored */
  if (rows > 3) t[2] = V + 5;  /* out of range: ignored */
  if (c->flag & 8)
    for (int r = 0; r < rows; r++) t[r] = 0;
  double *loss = calloc(2 * (size_t)rows, 8), *dz = calloc(n, 8);
  ref_xent(rows, V, c->f, 0, z, t, scale, loss, dz);
  float *res[2][2];
  for (int run = 0; run < 2; run++) {
    cl_mem Z = tu_upload(ctx, z, n), T = tu_upload(ctx, t, (size_t)rows),
           D = dev_zeros(ctx, n), L = dev_zeros(ctx, 2 * (size_t)rows);
    TU_OK(relcl_xent_forward_backward(ctx, rows, V, c->f, 0, B0(Z), B0(T), scale,
                                      in_place ? B0(Z) : B0(D), B0(L)));
    res[run][0] = tu_download(ctx, L, 2 * (size_t)rows);
    res[run][1] = tu_download(ctx, in_place ? Z : D, n);
    release(Z), release(T), release(D), release(L);
  }
  double e = tu_rel_err(res[0][0], loss, 2 * (size_t)rows, 1e-2);
  tu_check(e < 2e-5, "%-28s losses rel err %.2e", c->name, e);
  e = tu_rel_err(res[0][1], dz, n, 1e-2);
  tu_check(e < 2e-5, "%-28s dlogits rel err %.2e", c->name, e);
  int finite = 1;
  for (size_t i = 0; i < n; i++) finite &= isfinite(res[0][1][i]);
  for (int i = 0; i < 2 * rows; i++) finite &= isfinite(res[0][0][i]);
  tu_check(finite, "%-28s everything finite", c->name);
  tu_check(same_bits(res[0][0], res[1][0], 2 * (size_t)rows) &&
               same_bits(res[0][1], res[1][1], n),
           "%-28s bitwise identical on a second run", c->name);
  for (int r = 0; r < 2; r++) free(res[r][0]), free(res[r][1]);
  free(z), free(t), free(loss), free(dz);
}

/* ---- argmax ---- */

static void check_argmax(relcl_context *ctx, const layer_case *c) {
  const int rows = c->a, cols = c->b, ld = cols + c->flag;
  const size_t n = (size_t)rows * ld;
  float *x = tu_alloc_host(n);
  tu_fill(x, n, 101);
  if (c->flag) { /* ties and NaN */
    x[0 * ld + 2] = x[0 * ld + 5] = 7.0f;  /* row 0: tie, the first wins */
    x[1 * ld + 0] = NAN, x[1 * ld + 4] = 3.0f; /* row 1: a NaN never wins */
    for (int j = 0; j < cols; j++) x[2 * ld + j] = NAN; /* row 2: all NaN */
    for (int j = 0; j < cols; j++) x[3 * ld + j] = -INFINITY; /* row 3: all -inf */
    x[4 * ld + cols - 1] = 9.0f; /* row 4: the last column */
    x[4 * ld + cols] = 99.0f;    /* ... beyond cols: never read */
  }
  int32_t *want = calloc((size_t)rows, 4);
  ref_argmax(rows, cols, x, ld, want);
  cl_mem X = tu_upload(ctx, x, n), O = dev_zeros(ctx, (size_t)rows);
  TU_OK(relcl_argmax_rows(ctx, rows, cols, B0(X), ld, B0(O)));
  int32_t *got = calloc((size_t)rows, 4);
  TU_OK(relcl_read(ctx, B0(O), got, (size_t)rows));
  tu_check(memcmp(got, want, (size_t)rows * 4) == 0, "%-28s exact (row 0: %d vs %d)", c->name,
           got[0], want[0]);
  release(X), release(O);
  free(x), free(want), free(got);
}

/* ---- Adam ---- */

static void check_adam(relcl_context *ctx, const layer_case *c) {
  const size_t n = (size_t)c->a;
  const double lr = c->f;
  float *p0 = tu_alloc_host(n), *g = tu_alloc_host(n);
  tu_fill(p0, n, 111);
  double *p = to_double(p0, n), *m = calloc(n, 8), *v = calloc(n, 8);
  cl_mem P = tu_upload(ctx, p0, n), Gm = dev_zeros(ctx, n), M = dev_zeros(ctx, n),
         Vm = dev_zeros(ctx, n), S = dev_zeros(ctx, 1);
  relcl_adam_args a = {(float)lr, 0.9f, 0.98f, 1e-9f, 1, 0.25f, 0.0f};
  double worst_p = 0, worst_m = 0, worst_v = 0;
  float *fp = NULL, *fm = NULL, *fv = NULL;
  for (uint64_t step = 1; step <= 3; step++) {
    tu_fill(g, n, 112 + step);
    if (c->flag == 1) a.clip_norm = 0.05f; /* the scaled norm is ~0.25 sqrt(n/3): clipped */
    if (c->flag == 2) a.clip_norm = 1e6f;  /* never reached */
    a.step = step;
    ref_adam(n, lr, 0.9, 0.98, 1e-9, step, 0.25, a.clip_norm, g, p, m, v);
    TU_OK(relcl_write(ctx, B0(Gm), g, n));
    if (a.clip_norm > 0.0f) TU_OK(relcl_sumsq(ctx, n, B0(Gm), B0(S)));
    TU_OK(relcl_adam_update(ctx, n, &a, B0(P), B0(Gm), B0(M), B0(Vm), B0(S)));
    free(fp), free(fm), free(fv);
    fp = tu_download(ctx, P, n), fm = tu_download(ctx, M, n), fv = tu_download(ctx, Vm, n);
    double em = tu_rel_err(fm, m, n, 1e-8), ev = tu_rel_err(fv, v, n, 1e-12);
    double ep = 0.0;
    for (size_t i = 0; i < n; i++) ep = tu_worse(ep, fabs(fp[i] - p[i]) / lr);
    worst_p = tu_worse(worst_p, ep), worst_m = tu_worse(worst_m, em);
    worst_v = tu_worse(worst_v, ev);
  }
  tu_check(worst_m < 1e-5 && worst_v < 1e-5, "%-28s m, v rel err %.2e %.2e", c->name, worst_m,
           worst_v);
  tu_check(worst_p < 1e-4, "%-28s param err / lr %.2e (3 steps)", c->name, worst_p);
  release(P), release(Gm), release(M), release(Vm), release(S);
  free(fp), free(fm), free(fv), free(p0), free(g), free(p), free(m), free(v);
}

/* ---- bad arguments: errors with messages, no crash ---- */

static void check_errors(relcl_context *ctx) {
  cl_mem small = dev_zeros(ctx, 8);
  relcl_buf b = B0(small), none = RELCL_BUF_NONE;
  struct {
    const char *what;
    relcl_status st;
  } r[] = {
      {"layernorm NULL ctx",
       relcl_layernorm_forward(NULL, 1, 4, 1e-5f, b, b, b, b, b, b)},
      {"layernorm rows=0", relcl_layernorm_forward(ctx, 0, 4, 1e-5f, b, b, b, b, b, b)},
      {"layernorm buffer too small", relcl_layernorm_forward(ctx, 4, 4, 1e-5f, b, b, b, b, b, b)},
      {"layernorm missing x", relcl_layernorm_forward(ctx, 1, 4, 1e-5f, none, b, b, b, b, b)},
      {"dropout p=1", relcl_dropout_forward(ctx, 4, 1.0f, 1, 1, b, none, b)},
      {"dropout p=NaN", relcl_dropout_forward(ctx, 4, NAN, 1, 1, b, none, b)},
      {"linear too small", relcl_linear_forward(ctx, 3, 3, 3, b, b, none, b)},
      {"heads ld too small", relcl_heads_split(ctx, 1, 2, 2, 2, b, 3, b)},
      {"linear heads out=3 heads*dh=2", relcl_linear_forward_heads(ctx, 1, 1, 1, 3, 1, 2, b, b,
                                                                   none, b)},
      {"linear heads n=0", relcl_linear_forward_heads(ctx, 1, 0, 1, 2, 1, 2, b, b, none, b)},
      {"linear heads y too small", relcl_linear_forward_heads(ctx, 3, 2, 1, 2, 1, 2, b, b, none,
                                                              b)},
      {"xent eps=2", relcl_xent_forward_backward(ctx, 1, 4, 2.0f, 0, b, b, 1.0f, b, b)},
      {"argmax ld < cols", relcl_argmax_rows(ctx, 1, 4, b, 2, b)},
      {"adam step 0",
       relcl_adam_update(ctx, 4, &(relcl_adam_args){1e-3f, 0.9f, 0.98f, 1e-9f, 0, 1, 0}, b, b,
                         b, b, none)},
      {"adam clip without sumsq",
       relcl_adam_update(ctx, 4, &(relcl_adam_args){1e-3f, 0.9f, 0.98f, 1e-9f, 1, 1, 1}, b, b,
                         b, b, none)},
      {"embedding index NULL", relcl_embedding_index(NULL, 1, 4, NULL, NULL, NULL, NULL)},
      {"colsum cols=0", relcl_colsum(ctx, 1, 0, b, 1, b, 0)},
  };
  for (size_t i = 0; i < sizeof r / sizeof *r; i++)
    tu_check(r[i].st != RELCL_OK && relcl_last_error()[0] != '\0', "error: %-28s -> %s",
             r[i].what, relcl_status_str(r[i].st));
  release(small);
}

/* --small: the cases small enough for Oclgrind; --keep-buffers: see test_attention.c. */
int main(int argc, char **argv) {
  int small = 0;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--small") == 0)
      small = 1;
    else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--keep-buffers") == 0)
      keep_buffers = 1;
    else {
      fprintf(stderr, "usage: test_layers [--small] [--case NAME] [--keep-buffers]\n");
      return 2;
    }
  }
  relcl_context *ctx = tu_context();
  printf("device: %s\n", relcl_context_device_name(ctx));
  tu_check_width(relcl__cpu_width(ctx));
  printf("weight gradients: %s\n", relcl__wgrad_local(ctx) ? "gemm_cpu_at (local copies of A^T)"
                                                             : "transposed copies");
  const char *wgrad_env = getenv("RELCL_WGRAD");
  if (wgrad_env && strcmp(wgrad_env, "copy") == 0)
    tu_check(!relcl__wgrad_local(ctx), "RELCL_WGRAD=copy: the context copies A^T");
  if (relcl__wgrad_local(ctx) && !keep_buffers) { /* not under Oclgrind */
    setenv("RELCL_WGRAD", "copy", 1);
    copies = tu_context();
    unsetenv("RELCL_WGRAD");
  }
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const layer_case *c = &cases[i];
    if (only && strstr(c->name, only) == NULL) continue;
    /* under a simulator: nothing over ~20k elements */
    if (small && (double)c->a * (c->b ? c->b : 1) * (c->c ? c->c : 1) > 20000) continue;
    switch (c->op) {
      case OP_LAYERNORM: check_layernorm(ctx, c); break;
      case OP_EMBEDDING: check_embedding(ctx, c); break;
      case OP_DROPOUT: check_dropout(ctx, c); break;
      case OP_LINEAR: check_linear(ctx, c); break;
      case OP_LINEAR_HEADS: check_linear_heads(ctx, c); break;
      case OP_FILL: check_fill(ctx, c); break;
      case OP_ELEMENTWISE: check_elementwise(ctx, c); break;
      case OP_FUSED: check_fused(ctx, c); break;
      case OP_HEADS: check_heads(ctx, c); break;
      case OP_COLSUM: check_colsum(ctx, c); break;
      case OP_SUMSQ: check_sumsq(ctx, c); break;
      case OP_XENT: check_xent(ctx, c); break;
      case OP_ARGMAX: check_argmax(ctx, c); break;
      case OP_ADAM: check_adam(ctx, c); break;
      case OP_TRANSPOSE: check_transpose(ctx, c); break;
      case OP_BATCHED: check_batched(ctx, c); break;
      case OP_RELU_LINEAR: check_relu_linear(ctx, c); break;
      case OP_FFN_LD: check_ffn_ld(ctx, c); break;
    }
  }
  if (!only) check_errors(ctx);
  for (size_t i = 0; i < n_kept; i++) clReleaseMemObject(kept[i]);
  if (copies) relcl_context_destroy(copies);
  relcl_context_destroy(ctx);
  return tu_finish();
}
