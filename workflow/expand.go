package workflow

// Expander is implemented by workflow types whose one job-file workflow
// runs as several dispatched parts of different kinds (a RainStorm
// pipeline's source and stage tasks). Expand returns one params per part;
// the job carries them as shards 1..n of the workflow, so each is placed,
// fenced and re-placed on its own like any shard. `shards:` does not apply.
type Expander interface {
	Expand(params []byte) ([][]byte, error)
}

// PartsChecker is implemented by an Expander whose parts are only valid
// together (a pipeline's tasks refer to the first task's spec rather than
// each carrying a copy): the job model checks every group of its parts
// with it.
type PartsChecker interface {
	CheckParts(parts [][]byte) error
}
