package review

import (
	"encoding/json"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// RecordFile is the review's record in the run folder (the last review).
const RecordFile = "review.json"

func writeRecord(dir runrec.Dir, rep Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return runrec.WriteFileAtomic(dir.Path(RecordFile), append(b, '\n'), 0o644)
}
