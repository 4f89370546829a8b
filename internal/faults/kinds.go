package faults

import "math"

// Where says who injects a fault kind.
type Where string

const (
	// InProcess: the rank injects it into itself at a window (HDET_FAULTS,
	// the hdet-faults binary: FromEnv), as Self says.
	InProcess Where = "in-process"
	// Outside: a test strikes hdet's processes, the test bed's hosts, links
	// or disk (the chaos soak's injectors, tests/chaos_faults_test.go).
	Outside Where = "outside"
)

// Kind is one fault kind: its name, where it is injected and what a run
// must show after it. Both the fault suite (tests/faults_test.go) and the
// chaos soak (tests/chaos_*_test.go) read Kinds, so that a new kind is one
// row here plus its injector (CONTRIBUTING.md, "Add a fault kind").
type Kind struct {
	Name  string
	Where Where
	How   string // what it does, for people (the soak's table, docs/chaos.md)
	Outcome
	Self *Self // InProcess: what the rank does to its windows
	Soak *Soak // Outside: its place in the chaos soak's schedule; nil: the soak does not inject it
}

// Outcome is what a run must show after a fault. The fault suite asserts
// it of the run (showsAfter); the chaos soak's verdict reads it for the
// launch the fault struck (what ended the launch, its exit code, when its
// bound starts), and an injector asserts Log where it applies (a launch
// struck in training, one that resumes).
type Outcome struct {
	// Lives: the run trains on through it and finishes; else it may end
	// the launch (non-zero), and a relaunch resumes. The soak blames a
	// launch that ended on the last fault that does not live.
	Lives bool
	Exit  int    // the exit code of a launch it alone ends; 0: not one code
	Log   string // text the run's log shows after it; "": none asserted
	// FromEnd: a launch it ends exits only once it is over (a frozen host:
	// mpirun cannot end a job while a node daemon is stopped), so the
	// soak's bound on the exit counts from its end, not its start.
	FromEnd bool
}

// Self is how an in-process fault hits the windows: written KIND=WINDOW
// (EveryRank) or KIND=RANK@WINDOW.
type Self struct {
	EveryRank bool
	// Onward: it hits its window and every later one, each time it runs;
	// else its window only, and only the first time it runs (not the
	// re-run after a rollback).
	Onward bool
	Scale  float64 // the factor on the losses of a window it hits; 0: none
	Stop   bool    // the rank stops itself (SIGSTOP) as the window starts
}

// Soak is how the chaos soak schedules an outside fault.
type Soak struct {
	Weight int // in the random part of the schedule
	N      int // faults it injects (a scenario: the launch ended, then its own)
	// Trains: the run may train on while the fault is in force (its slot
	// gets the longer hold); Strikes: it strikes within milliseconds of its
	// moment, everything it needs found beforehand (the commit's slot takes
	// only such a kind).
	Trains, Strikes bool
	Worker          bool // only the PyTorch soak (a worker's script) has it
}

// Kinds is every fault kind. The soak draws its kinds in this order (a
// seed replays the same schedule); where a window has several in-process
// faults whose Scale applies, the first row's wins.
var Kinds = []Kind{
	{Name: "nan", Where: InProcess, How: "rank R's window loss is NaN from window W on",
		Outcome: Outcome{Lives: true, Log: "had a non-finite loss or parameters"}, Self: &Self{Onward: true, Scale: math.NaN()}},
	{Name: "nan_all", Where: InProcess, How: "every rank's loss is NaN in window W, first pass only: a rollback",
		Outcome: Outcome{Lives: true, Log: "rolled back to the checkpoint at step"}, Self: &Self{EveryRank: true, Scale: math.NaN()}},
	{Name: "stop", Where: InProcess, How: "rank R stops itself (SIGSTOP) when it first starts window W, as a hung node would",
		Outcome: Outcome{Exit: 1, Log: "longer than train.watchdog"}, Self: &Self{Stop: true}},
	{Name: "diverge", Where: InProcess, How: "rank R's loss is 1000 times larger (still finite) from window W on",
		Outcome: Outcome{Lives: true, Log: "diverged; left out of the average"}, Self: &Self{Onward: true, Scale: 1000}},
	{Name: "blowup_all", Where: InProcess, How: "every rank's loss is 100 times larger (still finite) in window W, first pass only",
		Outcome: Outcome{Lives: true, Log: "training blew up everywhere"}, Self: &Self{EveryRank: true, Scale: 100}},

	{Name: "kill-rank", Where: Outside, How: "SIGKILL of one rank (any host)",
		Soak: &Soak{Weight: 4, N: 1, Strikes: true}},
	{Name: "kill-host", Where: Outside, How: "SIGKILL of every process on one host",
		Soak: &Soak{Weight: 3, N: 1, Strikes: true}},
	{Name: "freeze-host", Where: Outside, How: "SIGSTOP of every process on one host for train.watchdog + 2-5 s, then SIGCONT",
		Outcome: Outcome{FromEnd: true}, Soak: &Soak{Weight: 1, N: 1, Strikes: true}},
	{Name: "link-down", Where: Outside, How: "`ip link set eth0 down` inside one host for 2-20 s (it loses both links)",
		Soak: &Soak{Weight: 1, N: 1}},
	{Name: "partition", Where: Outside, How: "the link between two hosts cut for 2-20 s (a blackhole route each way)",
		Soak: &Soak{Weight: 1, N: 1}},
	{Name: "slow-link", Where: Outside, How: "one host's link slowed for 2-10 s (tc netem delay+loss, or tbf where the kernel has no netem)",
		Outcome: Outcome{Lives: true}, Soak: &Soak{Weight: 2, N: 1, Trains: true}},
	{Name: "disk-full", Where: Outside, How: "the run directory's tmpfs filled to 0-400 kB free for 0.2-1.5 s",
		Outcome: Outcome{Lives: true}, Soak: &Soak{Weight: 3, N: 1, Trains: true, Strikes: true}},
	{Name: "disk-full-long", Where: Outside, How: "filled to 0-32 kB free for run.checkpoint_max_failing + 5-15 s; relaunched meanwhile",
		Outcome: Outcome{Log: "(run.checkpoint_max_failing "}, Soak: &Soak{Weight: 1, N: 1, Trains: true, Strikes: true}},
	{Name: "sigusr1", Where: Outside, How: "SIGUSR1 to mpirun (Slurm's warning): checkpoint and exit 3",
		Outcome: Outcome{Exit: 3}, Soak: &Soak{Weight: 3, N: 1, Strikes: true}},
	{Name: "explorer-kill", Where: Outside, How: "SIGKILL of the lr explorer plugin",
		Outcome: Outcome{Lives: true}, Soak: &Soak{Weight: 4, N: 1, Strikes: true}},
	{Name: "corrupt-checkpoint", Where: Outside, How: "a launch ended (kill or SIGUSR1), then its newest checkpoint damaged before the relaunch",
		Outcome: Outcome{Lives: true, Log: "skipping a damaged checkpoint"}, Soak: &Soak{Weight: 1, N: 2, Strikes: true}},
	{Name: "resume", Where: Outside, How: "a launch ended, then the relaunch hit at a random moment of its setup or as it reads the checkpoint: SIGKILL of a rank or host, SIGUSR1, full disk",
		Soak: &Soak{Weight: 2, N: 2, Trains: true, Strikes: true}},
	{Name: "double", Where: Outside, How: "two of kill-rank, kill-host, explorer-kill, sigusr1, disk-full within one window (both armed first)",
		Soak: &Soak{Weight: 2, N: 2, Trains: true, Strikes: true}},
	{Name: "kill-python", Where: Outside, How: "SIGKILL of one rank's Python (the worker script), any host",
		Soak: &Soak{Weight: 4, N: 1, Strikes: true, Worker: true}},
	{Name: "sigterm", Where: Outside, How: "SIGTERM to mpirun (scancel; hdet sbatch's script passes it on): the launch must end within the bound",
		Soak: &Soak{Weight: 2, N: 1, Strikes: true, Worker: true}},
}

// Lookup is the row of Kinds named name.
func Lookup(name string) (Kind, bool) {
	for _, k := range Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}
