//! `vmscale list`: scenarios, their knobs and defaults.

use crate::failure::Failure;

pub fn list() -> Result<(), Failure> {
    for scenario in vmscale_scenario::catalogue() {
        println!("{}  ({})", scenario.name, scenario.case);
        println!("    {}", scenario.summary);
        println!("    sweeps: {}", scenario.sweep);
        for knob in &scenario.knobs {
            println!(
                "    {:<12} {:<16} {}",
                knob.flag,
                format!("[{}]", knob.default),
                knob.help
            );
        }
        println!("    run: vmscale run {} [knobs]", scenario.name);
    }
    Ok(())
}
