/* Streams a completion through the bitsplit C API, printing what `bitsplit run` prints on
 * stdout: the prompt, then the generated text. Usage: stream MODEL PROMPT [N [TEMP [SEED [BUDGET]]]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bitsplit/bitsplit.h>

static int print_piece(void* user_data, bitsplit_token token, const char* text, size_t length) {
  (void)user_data;
  (void)token;
  fwrite(text, 1, length, stdout);
  fflush(stdout);
  return 0; /* nonzero would stop the generation */
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL PROMPT [N [TEMP [SEED [BUDGET]]]]\n", argv[0]);
    return 2;
  }
  bitsplit_model* model = NULL;
  if (bitsplit_model_load(argv[1], NULL, &model) != BITSPLIT_OK) {
    fprintf(stderr, "error: %s\n", bitsplit_last_error());
    return 1;
  }
  bitsplit_session_params params;
  bitsplit_session_params_init(&params);
  params.temperature = argc > 4 ? (float)atof(argv[4]) : 0.0f;
  params.seed = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;
  params.budget = argc > 6 ? atoi(argv[6]) : 0; /* 0: chosen online (fix it for reproducible sampling) */
  bitsplit_session* session = NULL;
  bitsplit_token tokens[4096];
  size_t n_tokens = 0;
  bitsplit_generation_stats stats = {sizeof stats};
  int rc = 1;
  if (bitsplit_session_create(model, &params, &session) == BITSPLIT_OK &&
      bitsplit_tokenize(model, argv[2], strlen(argv[2]), 1, 0, tokens, 4096, &n_tokens) == BITSPLIT_OK) {
    fputs(argv[2], stdout);
    const int32_t n = argc > 3 ? atoi(argv[3]) : 64;
    if (bitsplit_session_generate(session, tokens, n_tokens, n, print_piece, NULL, &stats) == BITSPLIT_OK) rc = 0;
    fputc('\n', stdout);
  }
  if (rc != 0) fprintf(stderr, "error: %s\n", bitsplit_last_error());
  else fprintf(stderr, "%lld tokens, %.2f tokens per check\n", (long long)stats.generated_tokens, stats.tokens_per_check);
  bitsplit_session_free(session);
  bitsplit_model_free(model);
  return rc;
}
