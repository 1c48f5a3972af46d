package runtask

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	openai "github.com/sashabaranov/go-openai"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/runrec"
)

// notePrefix introduces an operator note in the conversation.
const notePrefix = "Note from the operator: "

// deliverNotes gives the model the operator's pending notes as user
// messages at a turn boundary and marks each delivered with the step whose
// request carries it. A note is added to the conversation (and persisted)
// before it is marked, and a note already in the conversation is only
// marked, so a crash between the two never loses or repeats a note.
func (r *runner) deliverNotes(ctx context.Context) {
	if r.opts.Store == nil {
		return
	}
	st := r.state
	notes, err := r.opts.Store.PendingNotes(ctx, st.RunID)
	r.storeResult(err, "pending notes")
	if err != nil {
		return
	}
	for _, n := range notes {
		if !slices.Contains(st.DeliveredNotes, n.ID) {
			st.Messages = append(st.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: notePrefix + n.Text})
			st.DeliveredNotes = append(st.DeliveredNotes, n.ID)
			if err := r.save(); err != nil {
				r.warnf("notes: %v", err)
				return
			}
			r.transcript(transcriptLine{Type: lineNote, Step: st.Step + 1, NoteID: n.ID, Text: n.Text})
			r.ev.emit(Event{Event: "note", Time: r.now(), RunID: st.RunID, Step: st.Step + 1, Text: fmt.Sprintf("note %d delivered", n.ID)})
		} else if !r.transcriptHasNote(n.ID) {
			// In the conversation but still pending: a crash came between
			// the state's save and the transcript line. The model has it;
			// the transcript gets it now, once.
			r.transcript(transcriptLine{Type: lineNote, Step: st.Step + 1, NoteID: n.ID, Text: n.Text})
		}
		err := r.opts.Store.MarkNoteDelivered(ctx, n.ID, st.Step+1)
		if errors.Is(err, bus.ErrConflict) || errors.Is(err, bus.ErrNotFound) {
			r.warnf("notes: mark %d delivered: %v", n.ID, err)
			err = nil
		}
		r.storeResult(err, fmt.Sprintf("mark note %d delivered", n.ID))
	}
}

// transcriptHasNote reports whether the run's transcript records note id
// (read only on the rare path of a note delivered but not yet marked).
func (r *runner) transcriptHasNote(id int64) bool {
	f, err := os.Open(r.runDir.Path(runrec.TranscriptFile))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 64<<20)
	for sc.Scan() {
		var l transcriptLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Type == lineNote && l.NoteID == id {
			return true
		}
	}
	return false
}
