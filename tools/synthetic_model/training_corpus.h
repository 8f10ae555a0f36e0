// The English text the synthetic models' BPE tokenizer is trained on: original
// prose written for this project (birds, weather, machines, rivers, kitchens,
// and so on), a few tens of kilobytes, so that the generator needs no download.
#ifndef COLIBRI_SCRIPTS_SYNTHETIC_MODEL_TRAINING_CORPUS_H_
#define COLIBRI_SCRIPTS_SYNTHETIC_MODEL_TRAINING_CORPUS_H_

#include <string>

namespace colibri::synthetic {

// The paragraphs joined by blank lines.
const std::string& TrainingCorpus();

}  // namespace colibri::synthetic

#endif  // COLIBRI_SCRIPTS_SYNTHETIC_MODEL_TRAINING_CORPUS_H_
